package bridge_test

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestReadinessTurnsStaleWhenConsulIsUnreachable: /readyz goes 503 with a
// reason once Consul has been unreachable longer than stale_after, xDS keeps
// serving the last good state meanwhile, and readiness returns on recovery.
func TestReadinessTurnsStaleWhenConsulIsUnreachable(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	h := startBridgeWith(t, agent, fwd, func(c *bridge.Config) {
		c.Settings.Consul.StaleAfter = time.Second
	})
	c := dial(t, h, adsclient.SotW, nil)
	waitEndpoints(t, "web", ep(1001, "HEALTHY"), c)
	url := "http://" + h.daemon.AdminAddr().String() + "/readyz"
	waitReadyz := func(code int, contains string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			got, body := get(t, url)
			if got == code && strings.Contains(body, contains) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz = %d %s, want %d containing %q", got, body, code, contains)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitReadyz(http.StatusOK, "true")

	fwd.Stop()
	// The reason names the address the bridge cannot reach, and why.
	waitReadyz(http.StatusServiceUnavailable, "Consul at "+fwd.Addr()+" unreachable for")
	if _, body := get(t, url); !strings.Contains(body, "last error: ") || !strings.Contains(body, fwd.Addr()) {
		t.Errorf("/readyz does not say what failed: %s", body)
	}
	_, body := get(t, "http://"+h.daemon.AdminAddr().String()+"/metrics")
	if v := metricValue(body, "consul_xds_bridge_ready"); v != 0 {
		t.Errorf("consul_xds_bridge_ready = %v while /readyz is 503", v)
	}
	// consul_up turns 0 once Consul has been silent for
	// reconnect_hold_after (2s), not on the first failed request.
	for deadline := time.Now().Add(10 * time.Second); metricValue(body, "consul_xds_bridge_consul_up") != 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("consul_xds_bridge_consul_up = %v while Consul is cut off", metricValue(body, "consul_xds_bridge_consul_up"))
		}
		_, body = get(t, "http://"+h.daemon.AdminAddr().String()+"/metrics")
	}
	if v := metricSum(body, "consul_xds_bridge_consul_request_errors_total"); v <= 0 {
		t.Errorf("consul_xds_bridge_consul_request_errors_total = %v during the outage", v)
	}
	// Still serving: a new proxy gets the last good world.
	late := dialAs(t, h, adsclient.Delta, "late", nil)
	waitEndpoints(t, "web", ep(1001, "HEALTHY"), late)

	fwd.Start()
	waitReadyz(http.StatusOK, "true")
}

// TestReadinessSeesAFrozenConsul: a frozen agent (SIGSTOP: connections
// are accepted, nothing answers) makes /readyz 503 within stale_after and
// a few seconds; blocking queries alone noticed only when their wait plus
// HTTP timeout ran out (over 15 s even with the tests' 5 s wait, about
// 74 s by default). xDS keeps serving; thawed, the bridge is ready again.
func TestReadinessSeesAFrozenConsul(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	h := startBridgeWith(t, agent, fwd, func(c *bridge.Config) {
		c.Settings.Consul.StaleAfter = 3 * time.Second
	})
	c := dial(t, h, adsclient.SotW, nil)
	waitEndpoints(t, "web", ep(1001, "HEALTHY"), c)
	url := "http://" + h.daemon.AdminAddr().String() + "/readyz"
	wait := func(code int, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			got, body := get(t, url)
			if got == code {
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("/readyz = %d %s after %v, want %d", got, body, within, code)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	wait(http.StatusOK, 15*time.Second)
	agent.Freeze()
	thawed := false
	defer func() {
		if !thawed {
			agent.Thaw()
		}
	}()
	took := wait(http.StatusServiceUnavailable, 9*time.Second)
	t.Logf("/readyz 503 %v after the freeze (stale_after 3s)", took)
	waitEndpoints(t, "web", ep(1001, "HEALTHY"), c) // still serving
	agent.Thaw()
	thawed = true
	wait(http.StatusOK, 20*time.Second)
}

// metricSum is the sum of every series of a metric (its labels
// pre-initialised at 0, the first series may not be the one that moved).
func metricSum(body, name string) float64 {
	sum := 0.0
	for _, m := range regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(name)+`(\{[^}]*\})? ([0-9.e+-]+)$`).FindAllStringSubmatch(body, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		sum += v
	}
	return sum
}
