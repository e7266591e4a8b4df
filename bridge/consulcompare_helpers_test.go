package bridge_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// Helpers of the tests that compare what the bridge serves a sidecar with
// what Consul 1.15.4's own xDS server serves it for the same
// registrations and config entries.

// withSidecar is a registration's Connect block asking for a default
// sidecar_service.
func withSidecar() *api.AgentServiceConnect {
	return &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}
}

// webWithUpstreams is web (port 8080) whose sidecar has upstreams.
func webWithUpstreams(ups ...api.Upstream) *api.AgentServiceRegistration {
	return &api.AgentServiceRegistration{Name: "web", Port: 8080, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
		Proxy: &api.AgentServiceConnectProxyConfig{Upstreams: ups}}}}
}

// registerServices registers regs with agent, as an operator would.
func registerServices(t *testing.T, agent *consultest.Agent, regs ...*api.AgentServiceRegistration) {
	t.Helper()
	for _, reg := range regs {
		if err := agent.Client().Agent().ServiceRegister(reg); err != nil {
			t.Fatalf("register %s: %v", reg.Name, err)
		}
	}
}

// writeEntries writes config entries to agent's Consul.
func writeEntries(t *testing.T, agent *consultest.Agent, entries ...api.ConfigEntry) {
	t.Helper()
	for _, e := range entries {
		if _, _, err := agent.Client().ConfigEntries().Set(e, nil); err != nil {
			t.Fatalf("write %s/%s: %v", e.GetKind(), e.GetName(), err)
		}
	}
}

// startEntriesBridge starts the bridge against agent with the policy src
// and consul { config_entries = true }.
func startEntriesBridge(t *testing.T, agent *consultest.Agent, src string) *harness {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
		c.Settings.Consul.ConfigEntries = true
	})
}

// trustDomain is the Connect CA's trust domain of agent's Consul.
func trustDomain(t *testing.T, agent *consultest.Agent) string {
	t.Helper()
	roots, _, err := agent.Client().Connect().CARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	return roots.TrustDomain
}

// webSidecarState dials the xDS server at addr as web's sidecar (delta)
// and returns its state once ready holds.
func webSidecarState(t *testing.T, addr string, ready func(adsclient.State) bool) adsclient.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: addr, NodeID: "web-sidecar-proxy", Cluster: "web", Mode: adsclient.Delta, InitialFetchTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	st, err := c.Wait(ctx, ready)
	if err != nil {
		t.Fatalf("%s: %v\n%s", addr, err, c.Snapshot())
	}
	return st
}

// sameChain fails t where the bridge's view of web's upstream differs
// from Consul's in routes or mesh clusters, and where either side's
// endpoints of a cluster in want differ from want.
func sameChain(t *testing.T, consul, ours chainView, want map[string][]string) {
	t.Helper()
	t.Logf("Consul: %+v", consul)
	t.Logf("bridge: %+v", ours)
	if !slices.Equal(consul.routes, ours.routes) {
		t.Errorf("routes:\nConsul %q\nbridge %q", consul.routes, ours.routes)
	}
	if !slices.Equal(consul.clusters, ours.clusters) {
		t.Errorf("mesh clusters:\nConsul %q\nbridge %q", consul.clusters, ours.clusters)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if eps := want[name]; !slices.Equal(consul.endpoints[name], eps) || !slices.Equal(ours.endpoints[name], eps) {
			t.Errorf("%s endpoints: want %v (its target's sidecars); Consul %v, bridge %v", name, eps, consul.endpoints[name], ours.endpoints[name])
		}
	}
}
