package bridge_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue returns the value of the first sample of name in Prometheus
// text output, or -1. A name with a label set ("x{a=\"b\"}") must match
// it exactly; a bare name matches any labels.
func metricValue(body, name string) float64 {
	pattern := `(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`
	if strings.Contains(name, "{") {
		pattern = `(?m)^` + regexp.QuoteMeta(name) + `() ([0-9.e+-]+)$`
	}
	m := regexp.MustCompile(pattern).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[2], 64)
	return v
}

func TestAdminCatalogAndMetrics(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, []string{"v1"}, nil)
	agent.RegisterTTL(t, "web", "web-2", 1002, []string{"v2"}, nil)
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.Settings.Admin.Pprof = true
	})
	c := dial(t, h, adsclient.SotW, nil)
	waitEndpoints(t, "web", join(ep(1001, "HEALTHY"), ep(1002, "HEALTHY")), c)
	base := "http://" + h.daemon.AdminAddr().String()

	code, body := get(t, base+"/v1/catalog")
	if code != http.StatusOK {
		t.Fatalf("/v1/catalog = %d %s", code, body)
	}
	var cat struct {
		Complete bool `json:"complete"`
		Services []struct {
			Name      string `json:"name"`
			Instances []struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"instances"`
		} `json:"services"`
	}
	if err := json.Unmarshal([]byte(body), &cat); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range cat.Services {
		if s.Name == "web" {
			found = len(s.Instances) == 2 && s.Instances[0].Status == "passing"
		}
	}
	if !cat.Complete || !found {
		t.Fatalf("/v1/catalog lacks web's two passing instances: %s", body)
	}

	code, body = get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, name := range []string{
		"consul_xds_bridge_consul_requests_total",
		"consul_xds_bridge_consul_request_seconds_count",
		"consul_xds_bridge_translate_seconds_count",
		"consul_xds_bridge_builds_total",
		"consul_xds_bridge_ready",
		"consul_xds_bridge_consul_up",
		`consul_xds_bridge_policy_reloads_total{result="ok"}`,
	} {
		if v := metricValue(body, name); v <= 0 {
			t.Errorf("metric %s = %v, want > 0", name, v)
		}
	}
	if code, _ := get(t, base+"/debug/pprof/"); code != http.StatusOK {
		t.Errorf("/debug/pprof/ = %d", code)
	}
}
