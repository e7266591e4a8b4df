package bridge_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// Central mode: the bridge serves the leaves the mesh clusters name, so
// they warm without a per-VM agent.
const meshRoutesHCL = `mesh {
  mode = "central"
}
mesh_routes "api" {
  route {
    split {
      service = "api"
      weight  = 80
    }
    split {
      service = "%s"
      weight  = 20
    }
  }
}
`

// weightedRoute is the weighted clusters of the first route of an
// upstream's route configuration, as "name=weight".
func weightedRoute(s adsclient.State, name string) []string {
	rc := s.RouteConfig(name)
	if rc == nil || len(rc.GetVirtualHosts()) != 1 || len(rc.GetVirtualHosts()[0].GetRoutes()) == 0 {
		return nil
	}
	var out []string
	for _, wc := range rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetWeightedClusters().GetClusters() {
		out = append(out, fmt.Sprintf("%s=%d", wc.GetName(), wc.GetWeight().GetValue()))
	}
	return out
}

// sidecarAddr is a registered sidecar's endpoint as Envoy gets it.
func sidecarAddr(t *testing.T, agent *consultest.Agent, id string) string {
	t.Helper()
	p := proxyService(t, agent, id)
	return fmt.Sprintf("%s:%d", p.Address, p.ServicePort)
}

// TestMeshRoutesSplit: against a real Consul -dev, web's sidecar dials
// api over HTTP (the upstream's protocol), and mesh_routes "api" splits
// 80/20 between api and api-canary, which no sidecar dials directly: the
// Envoy-like client of web's sidecar gets the upstream route with the two
// weighted mesh clusters, each with its service's sidecar as endpoint
// (the canary's read from its connect health). A reload splitting to
// another service (api-v2) is followed the same way, served once its
// connect health is read.
func TestMeshRoutesSplit(t *testing.T) {
	agent := consultest.Start(t)
	sidecar := &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}
	for _, reg := range []*api.AgentServiceRegistration{
		{Name: "web", Port: 8080, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Proxy: &api.AgentServiceConnectProxyConfig{Upstreams: []api.Upstream{{DestinationName: "api", LocalBindPort: 9191,
				Config: map[string]any{"protocol": "http"}}}}}}},
		{Name: "api", Port: 9090, Connect: sidecar},
		{Name: "api-canary", Port: 9091, Connect: sidecar},
		{Name: "api-v2", Port: 9092, Connect: sidecar},
	} {
		if err := agent.Client().Agent().ServiceRegister(reg); err != nil {
			t.Fatalf("register %s: %v", reg.Name, err)
		}
	}
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(meshRoutesHCL, "api-canary")), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
	})
	roots, _, err := agent.Client().Connect().CARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	td := roots.TrustDomain
	web := proxyService(t, agent, "web-sidecar-proxy")
	upstream := ir.SidecarGroupName(web.Node, "web-sidecar-proxy") + ".upstream.api"
	mcAPI, mcCanary, mcV2 := ir.MeshClusterName("api", "dc1", td), ir.MeshClusterName("api-canary", "dc1", td), ir.MeshClusterName("api-v2", "dc1", td)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: "web-sidecar-proxy", Cluster: "web"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	want := []string{mcAPI + "=80", mcCanary + "=20"}
	st, err := c.Wait(ctx, func(s adsclient.State) bool {
		return slices.Equal(weightedRoute(s, upstream), want) && len(s.Endpoints(mcAPI)) > 0 && len(s.Endpoints(mcCanary)) > 0
	})
	if err != nil {
		t.Fatalf("waiting for the split: %v; route %v, have %v", err, weightedRoute(c.Snapshot(), upstream), c.Snapshot())
	}
	for mc, id := range map[string]string{mcAPI: "api-sidecar-proxy", mcCanary: "api-canary-sidecar-proxy"} {
		if eps, want := st.Endpoints(mc), sidecarAddr(t, agent, id); len(eps) != 1 || eps[0].Address != want {
			t.Errorf("%s endpoints %v, want %s's %s", mc, eps, id, want)
		}
		if cl := st.Cluster(mc); cl == nil || cl.GetTransportSocket() == nil {
			t.Errorf("mesh cluster %s without TLS: %v", mc, cl)
		}
	}

	// A reload naming another service: its connect health is followed
	// from then on.
	if err := os.WriteFile(file, []byte(fmt.Sprintf(meshRoutesHCL, "api-v2")), 0o644); err != nil {
		t.Fatal(err)
	}
	want = []string{mcAPI + "=80", mcV2 + "=20"}
	servedEmpty := false
	st, err = c.Wait(ctx, func(s adsclient.State) bool {
		routed := slices.Equal(weightedRoute(s, upstream), want)
		// The build waits for v2's connect health: its share never goes
		// to a cluster without endpoints.
		servedEmpty = servedEmpty || routed && len(s.Endpoints(mcV2)) == 0
		return routed && len(s.Endpoints(mcV2)) > 0
	})
	if err != nil {
		t.Fatalf("waiting for the reloaded split: %v; route %v", err, weightedRoute(c.Snapshot(), upstream))
	}
	if servedEmpty {
		t.Error("the reloaded split was served before api-v2's endpoints were read")
	}
	if eps, want := st.Endpoints(mcV2), sidecarAddr(t, agent, "api-v2-sidecar-proxy"); len(eps) != 1 || eps[0].Address != want {
		t.Errorf("%s endpoints %v, want %s", mcV2, eps, want)
	}
	if _, err := c.Wait(ctx, func(s adsclient.State) bool { return s.Cluster(mcCanary) == nil }); err != nil {
		t.Errorf("the canary's cluster is still served after the reload: %v", err)
	}
}

// TestMeshRoutesFromConsulEntries: with the mesh and consul.config_entries,
// Consul's own service-splitter for an HTTP service applies between
// sidecars as it does in Consul's mesh: web's sidecar gets its upstream
// api split 80/20 between api's and api-canary's mesh clusters.
func TestMeshRoutesFromConsulEntries(t *testing.T) {
	agent := consultest.Start(t)
	sidecar := &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}
	for _, reg := range []*api.AgentServiceRegistration{
		{Name: "web", Port: 8080, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Proxy: &api.AgentServiceConnectProxyConfig{Upstreams: []api.Upstream{{DestinationName: "api", LocalBindPort: 9191}}}}}},
		{Name: "api", Port: 9090, Connect: sidecar},
		{Name: "api-canary", Port: 9091, Connect: sidecar},
	} {
		if err := agent.Client().Agent().ServiceRegister(reg); err != nil {
			t.Fatalf("register %s: %v", reg.Name, err)
		}
	}
	for _, e := range []api.ConfigEntry{
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api-canary", Protocol: "http"},
		&api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: "api", Splits: []api.ServiceSplit{{Weight: 80}, {Weight: 20, Service: "api-canary"}}},
	} {
		if _, _, err := agent.Client().ConfigEntries().Set(e, nil); err != nil {
			t.Fatal(err)
		}
	}
	h := startMeshBridge(t, agent, "mesh {\n  mode = \"central\"\n}\n", func(c *bridge.Config) { c.Settings.Consul.ConfigEntries = true })
	roots, _, err := agent.Client().Connect().CARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	web := proxyService(t, agent, "web-sidecar-proxy")
	upstream := ir.SidecarGroupName(web.Node, "web-sidecar-proxy") + ".upstream.api"
	mcAPI, mcCanary := ir.MeshClusterName("api", "dc1", roots.TrustDomain), ir.MeshClusterName("api-canary", "dc1", roots.TrustDomain)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: "web-sidecar-proxy", Cluster: "web"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	want := []string{mcAPI + "=80", mcCanary + "=20"}
	if _, err := c.Wait(ctx, func(s adsclient.State) bool {
		return slices.Equal(weightedRoute(s, upstream), want) && len(s.Endpoints(mcCanary)) > 0
	}); err != nil {
		t.Fatalf("waiting for the splitter's split: %v; route %v", err, weightedRoute(c.Snapshot(), upstream))
	}
}
