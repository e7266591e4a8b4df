package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// get fetches url with the admin token of the daemon it names (adminGet).
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := adminGet(url)
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

	// The client holds the endpoints once it has the response; its ACK
	// reaches the server a moment later.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, body = get(t, base+"/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics = %d", code)
		}
		if metricValue(body, `consul_xds_bridge_acks_total{type="EDS"}`) > 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, name := range []string{
		"consul_xds_bridge_consul_requests_total",
		"consul_xds_bridge_consul_request_seconds_count",
		"consul_xds_bridge_translate_seconds_count",
		"consul_xds_bridge_builds_total",
		"consul_xds_bridge_ready",
		"consul_xds_bridge_consul_up",
		`consul_xds_bridge_policy_reloads_total{result="ok"}`,
		"consul_xds_bridge_change_to_snapshot_seconds_count",
		"consul_xds_bridge_connected_proxies",
		`consul_xds_bridge_pushes_total{type="CDS"}`,
		`consul_xds_bridge_acks_total{type="EDS"}`,
		`consul_xds_bridge_snapshot_resources{type="CDS"}`,
		"consul_xds_bridge_snapshot_update_seconds_count",
		"consul_xds_bridge_consul_query_slots",
	} {
		if v := metricValue(body, name); v <= 0 {
			t.Errorf("metric %s = %v, want > 0", name, v)
		}
	}
	// The watches' blocking queries hold their slots once their first
	// reads are done.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body = get(t, base+"/metrics")
		if metricValue(body, "consul_xds_bridge_consul_queries_in_flight") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("consul_xds_bridge_consul_queries_in_flight stayed 0")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _ := get(t, base+"/debug/pprof/"); code != http.StatusOK {
		t.Errorf("/debug/pprof/ = %d", code)
	}
}

// TestProxyStatusACKAndNACK: of two proxies, one ACKs and one NACKs a
// pushed version; /v1/proxies shows SYNCED and NACKED with the proxy's
// error text, and the NACKing proxy becomes SYNCED once it ACKs a later
// version.
func TestProxyStatusACKAndNACK(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	h := startBridge(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()))
	good := dialAs(t, h, adsclient.SotW, "good", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	picky, err := adsclient.Dial(ctx, adsclient.Config{
		Addr: h.daemon.XDSAddr().String(), NodeID: "picky-1", Cluster: "picky",
		// Rejects any cluster set that contains "api", like an Envoy that
		// cannot accept one of its settings.
		NACK: func(typeURL, version string, res []*anypb.Any) error {
			if typeURL != adsclient.ClusterType {
				return nil
			}
			for _, r := range res {
				var c clusterv3.Cluster
				if r.UnmarshalTo(&c) == nil && c.GetName() == "api" {
					return errors.New("cluster api: unsupported setting (test)")
				}
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = picky.Close() })
	waitEndpoints(t, "web", ep(1001, "HEALTHY"), good, picky)
	base := "http://" + h.daemon.AdminAddr().String()
	proxies := func() map[string]serve.ProxyStatus {
		var ps []serve.ProxyStatus
		_, body := get(t, base+"/v1/proxies")
		if err := json.Unmarshal([]byte(body), &ps); err != nil {
			t.Fatalf("/v1/proxies: %v: %s", err, body)
		}
		out := map[string]serve.ProxyStatus{}
		for _, p := range ps {
			out[p.NodeID] = p
		}
		return out
	}
	waitStatus := func(node, want string) serve.ProxyStatus {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			p, ok := proxies()[node]
			if ok && p.Status == want {
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s status = %q, want %q: %+v", node, p.Status, want, p)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitStatus("test-sotw-good", serve.StatusSynced)
	waitStatus("picky-1", serve.StatusSynced)

	agent.RegisterTTL(t, "api", "api-1", 2001, nil, nil)
	waitClusters(t, func(n []string) bool { return slices.Contains(n, "api") }, "api cluster at the good proxy", good)
	p := waitStatus("picky-1", serve.StatusNACKed)
	cds := p.Types["CDS"]
	if cds == nil || cds.LastNACK == nil || !strings.Contains(cds.LastNACK.Error, "unsupported setting (test)") || cds.LastNACK.Version != cds.VersionSent {
		t.Fatalf("NACK not recorded with its text and version: %+v", cds)
	}
	// The good proxy's group is updated on its own; it reaches the same
	// version (content hashes) soon after, not necessarily before.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		g := waitStatus("test-sotw-good", serve.StatusSynced)
		if g.Types["CDS"].VersionAcked == cds.LastNACK.Version {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("good proxy ACKed %q, the picky one rejected %q: should be the same version", g.Types["CDS"].VersionAcked, cds.LastNACK.Version)
		}
	}
	if picky.Snapshot().Cluster("api") != nil {
		t.Fatal("the NACKing proxy holds the rejected cluster")
	}

	agent.Deregister(t, "api-1")
	waitStatus("picky-1", serve.StatusSynced)

	code, body := get(t, base+"/v1/config_dump?node=picky-1")
	if code != http.StatusOK || !strings.Contains(body, `"name": "web"`) {
		t.Fatalf("/v1/config_dump?node=picky-1 = %d: %.300s", code, body)
	}
	if code, _ := get(t, base+"/v1/config_dump?node=nobody"); code != http.StatusNotFound {
		t.Fatalf("config dump of an unknown node = %d, want 404", code)
	}
}
