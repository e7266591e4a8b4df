package bridge

import (
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// TestMeshState: nothing is built before the mesh and its entries were
// read; entries change only when intentions or protocols do; the
// catalog joined with the mesh is a copy; destinations are watched.
func TestMeshState(t *testing.T) {
	s := meshState{needed: true}
	if !s.waiting() {
		t.Fatal("not waiting before any read")
	}
	s.mesh = &consul.Mesh{TrustDomain: "td", Proxies: []consul.Proxy{{ID: "web-sidecar-proxy", Node: "n", Service: "web"}}}
	if !s.waiting() {
		t.Fatal("not waiting for the config entries")
	}
	intentions := []api.ConfigEntry{
		&api.ServiceIntentionsConfigEntry{Kind: api.ServiceIntentions, Name: "web", Sources: []*api.SourceIntention{{Name: "api", Action: api.IntentionActionDeny}}},
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "api"},
	}
	if !s.setEntries(intentions) || s.waiting() {
		t.Fatal("first entries: no change, or still waiting")
	}
	if s.setEntries(slices.Clone(intentions)) {
		t.Error("the same entries again count as a change")
	}
	if !s.setEntries(intentions[1:]) {
		t.Error("an intention removed is no change")
	}
	cat := consul.NewCatalog(nil)
	joined := s.withMesh(cat)
	if cat.Mesh != nil || joined.Mesh == nil || joined.Mesh.Protocols["api"] != "http" || len(joined.Mesh.Intentions) != 0 {
		t.Errorf("withMesh: shared catalog %+v, joined %+v", cat.Mesh, joined.Mesh)
	}
	if got := s.watchTargets(&policy.Policy{}).Services; !slices.Contains(got, consul.ServiceKey{Name: "web"}) {
		t.Errorf("targets %v lack the sidecar's destination", got)
	}
	if got := len(policyEntries(consul.ConfigEntriesUpdate{Entries: intentions}).Entries); got != 2 {
		t.Errorf("policy entries: %d, want service-defaults and service-router", got)
	}
}

// TestSidecarIndex: registered sidecars by proxy id; a policy group
// declared sidecar_for is keyed by node.cluster, not here.
func TestSidecarIndex(t *testing.T) {
	sc := &ir.Sidecar{ProxyID: "web-sidecar-proxy", Node: "n", Service: "web", Upstreams: []ir.MeshUpstream{{Service: "api", BindAddress: "127.0.0.1", BindPort: 9191}}}
	m := &ir.Model{Groups: []ir.Group{{Name: ir.SidecarGroupName("n", "web-sidecar-proxy"), Sidecar: sc}, {Name: "web-envoys", Sidecar: sc}}}
	idx := sidecarIndex(m)
	if len(idx) != 1 || len(idx["web-sidecar-proxy"]) != 1 {
		t.Fatalf("index = %+v", idx)
	}
	if in := idx["web-sidecar-proxy"][0]; in.Group("web-sidecar-proxy") != "sidecar:n/web-sidecar-proxy" || !slices.Equal(in.Upstreams, []string{"api@127.0.0.1:9191"}) {
		t.Errorf("info = %+v", in)
	}
	resolve := pipeline.GroupOf(&policy.Policy{})
	if got := resolve("sidecar:n/web-sidecar-proxy"); got != "sidecar:n/web-sidecar-proxy" {
		t.Errorf("resolve = %q", got)
	}
}

// TestPendingTargetsWaitForLocalOnly: a mesh_routes target not read yet
// holds a build back; a failover datacenter not read never does (it may
// never answer, and would hold every build for good).
func TestPendingTargetsWaitForLocalOnly(t *testing.T) {
	pol, diags := policy.Parse("p", []byte("mesh {}\nservice \"api\" {\n  failover {\n    datacenters = [\"dc2\"]\n  }\n}\nmesh_routes \"api\" {\n  route {\n    service = \"api-canary\"\n  }\n}\n"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	cfg, diags := policy.Merge(pol)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	s := meshState{needed: true, mesh: &consul.Mesh{Endpoints: map[string][]consul.Proxy{}}}
	if got := s.pendingTargets(cfg.Policy); !slices.Equal(got, []string{"api-canary"}) {
		t.Errorf("pending %v, want the local target only", got)
	}
	s.mesh.Endpoints["api-canary"] = nil
	if got := s.pendingTargets(cfg.Policy); len(got) != 0 {
		t.Errorf("pending %v after the target was read, want none (dc2 never answered)", got)
	}
}
