package bridge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestConsulRestartHoldsConnect: the reconnect hold covers Consul Connect.
// A restarted Consul agent reports a sidecar's own HTTP check critical
// until it has run once, as it does a service's; with the hold, web's
// sidecar keeps api's sidecar as a healthy endpoint of its api mesh
// cluster through the restart (the catalog's hold alone held only api's
// own health), and the endpoint is still there after the window.
func TestConsulRestartHoldsConnect(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts Consul and waits out the hold: ~25s")
	}
	const hold = 12 * time.Second
	agent := consultest.Start(t, consultest.WithDataDir(""), consultest.WithHCL("connect { enabled = true }\n"))
	// The sidecars' port is the backend's too: a restarted agent gives a
	// restored sidecar Consul's default TCP check on its port, which must
	// find something listening (no Envoy runs here).
	port := backend(t)
	httpCheck := func() api.AgentServiceChecks {
		return api.AgentServiceChecks{{HTTP: fmt.Sprintf("http://127.0.0.1:%d/health", port), Interval: checkInterval, Timeout: "1s"}}
	}
	for _, reg := range []*api.AgentServiceRegistration{
		{Name: "web", Port: port, Checks: httpCheck(), Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Port: port, Checks: httpCheck(),
			Proxy: &api.AgentServiceConnectProxyConfig{Upstreams: []api.Upstream{{DestinationName: "api", LocalBindPort: 9191}}}}}},
		{Name: "api", Port: port, Checks: httpCheck(), Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Port: port, Checks: httpCheck()}}},
	} {
		if err := agent.Client().Agent().ServiceRegister(reg); err != nil {
			t.Fatal(err)
		}
	}
	h := startMeshBridge(t, agent, "mesh {\n  mode = \"central\"\n}\n", func(c *bridge.Config) { c.Settings.Consul.ReconnectHold = hold })
	roots, _, err := agent.Client().Connect().CARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	mc := ir.MeshClusterName("api", "dc1", roots.TrustDomain)
	rec := &minHealthy{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: "web-sidecar-proxy", Cluster: "web", OnUpdate: rec.onUpdate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// Every check has run once: api's sidecar is a healthy endpoint.
	if _, err := c.Wait(ctx, func(s adsclient.State) bool { return healthy(s.Endpoints(mc)) == 1 }); err != nil {
		t.Fatalf("api's sidecar never became a healthy endpoint of %s: %v; have %v", mc, err, c.Snapshot())
	}

	rec.start()
	agent.Kill()
	time.Sleep(2 * time.Second)
	agent.Restart(t)
	// The record ends before the window does (it starts when Consul
	// answers again, a moment after the restart).
	time.Sleep(hold - 3*time.Second)
	rec.stop()
	// No update of the cluster at all is the hold at work too.
	if n, ok := rec.result()[mc]; ok && n < 1 {
		t.Errorf("web's sidecar saw api's mesh endpoints drop to %d healthy during the restart; want the hold to keep 1", n)
	}
	// After the window, the real state: by then every check has run again.
	time.Sleep(6 * time.Second)
	wctx, wcancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer wcancel()
	if _, err := c.Wait(wctx, func(s adsclient.State) bool { return healthy(s.Endpoints(mc)) == 1 }); err != nil {
		entries, _, herr := agent.Client().Health().Connect("api", "", false, nil)
		var checks []string
		for _, e := range entries {
			for _, c := range e.Checks {
				checks = append(checks, c.CheckID+"="+c.Status)
			}
		}
		t.Fatalf("api's sidecar is not a healthy endpoint after the window: %v (Consul's checks of api's Connect endpoints: %v %v; served %v)", err, checks, herr, c.Snapshot())
	}
}
