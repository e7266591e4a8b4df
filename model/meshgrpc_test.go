package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// TestAddMeshGRPCFromCatalog: a Connect-native service's instances become
// server listeners (named by address, with its intentions), xds:///echo
// goes to its mesh gRPC cluster, proxyless clients reach that cluster
// instead of the plain one, and Envoy views are untouched.
func TestAddMeshGRPCFromCatalog(t *testing.T) {
	cat := &consul.Catalog{
		Services: []*consul.Service{{Name: "echo", Instances: []consul.Instance{
			{ID: "echo-1", Node: "n1", Address: "10.0.0.2", Port: 50051, Status: consul.StatusPassing},
			{ID: "echo-2", Node: "n2", Address: "10.0.0.1", Port: 50051, Status: consul.StatusCritical},
		}}},
		Mesh: &consul.Mesh{TrustDomain: "td.consul", Intentions: []*api.ServiceIntentionsConfigEntry{{
			Kind: api.ServiceIntentions, Name: "echo",
			Sources: []*api.SourceIntention{{Name: "api", Action: api.IntentionActionAllow}, {Name: "web", Action: api.IntentionActionDeny}},
		}}},
	}
	m, _ := Build(cat, &policy.Policy{ExportAllServices: true, UnmatchedNodes: policy.UnmatchedAll})
	in, warnings := MeshGRPCFromCatalog(cat, "dc1", []string{"echo", "ghost"}, ir.IntentionDeny)
	if len(warnings) != 1 || !strings.Contains(warnings[0], `"ghost" is not in the catalog`) {
		t.Errorf("warnings %q, want one about ghost", warnings)
	}
	warnings = append(warnings, AddMeshGRPC(m, in)...)
	if err := m.Validate(); err != nil {
		t.Fatalf("model does not validate: %v", err)
	}
	var names []string
	for i := range m.MeshGRPCServers {
		s := &m.MeshGRPCServers[i]
		names = append(names, s.ListenerName())
		if len(s.Intentions.Rules) != 2 || s.Intentions.Rules[0].Source != "api" || s.Intentions.Default != ir.IntentionDeny {
			t.Errorf("%s intentions %+v", s.ListenerName(), s.Intentions)
		}
	}
	want := []string{"grpc/server?xds.resource.listening_address=10.0.0.1:50051", "grpc/server?xds.resource.listening_address=10.0.0.2:50051"}
	if !slices.Equal(names, want) {
		t.Errorf("server listeners %q, want %q (every instance, whatever its health)", names, want)
	}
	mesh := ir.MeshGRPCClusterName("echo", "dc1", "td.consul")
	c := m.Cluster(mesh)
	if c == nil || !c.GRPCOnly() || !slices.Equal(c.TLS.MatchURISANs, []string{"spiffe://td.consul/ns/default/dc/dc1/svc/echo"}) || len(c.Endpoints) != 2 || !c.HTTP2 {
		t.Fatalf("mesh gRPC cluster %+v", c)
	}
	i := slices.IndexFunc(m.Proxyless, func(l ir.Listener) bool { return l.Name == "echo" })
	if i < 0 || !slices.Equal(m.Proxyless[i].ClusterRefs(), []string{mesh}) {
		t.Errorf("xds:///echo reaches %v, want only %s", m.Proxyless[i].ClusterRefs(), mesh)
	}
	if !slices.Contains(m.ProxylessClusters, mesh) || slices.Contains(m.ProxylessClusters, "echo") {
		t.Errorf("proxyless clusters %v, want the mesh one instead of echo", m.ProxylessClusters)
	}
	if m.Cluster("echo") == nil {
		t.Error("the plain echo cluster is gone; Envoys still route to it")
	}

	// No roots yet: nothing, and a warning.
	if in, w := MeshGRPCFromCatalog(&consul.Catalog{}, "dc1", []string{"echo"}, ir.IntentionDeny); len(in.Services) != 0 || len(w) != 1 {
		t.Errorf("without a trust domain: %+v, %q", in, w)
	}
}

// TestMeshGRPCBadIntentionsFailClosed: intentions the bridge cannot
// enforce as written deny every caller, and the servers keep a listener.
func TestMeshGRPCBadIntentionsFailClosed(t *testing.T) {
	cat := &consul.Catalog{
		Services: []*consul.Service{{Name: "echo", Instances: []consul.Instance{{ID: "echo-1", Datacenter: "dc1", Address: "10.0.0.2", Port: 50051, Status: consul.StatusPassing}}}},
		Mesh: &consul.Mesh{TrustDomain: "td.consul", Intentions: []*api.ServiceIntentionsConfigEntry{{
			Kind: api.ServiceIntentions, Name: "echo",
			Sources: []*api.SourceIntention{{Name: "api", Permissions: []*api.IntentionPermission{
				{Action: api.IntentionActionAllow, HTTP: &api.IntentionHTTPPermission{PathRegex: "("}},
			}}},
		}}},
	}
	in, warnings := MeshGRPCFromCatalog(cat, "", []string{"echo"}, ir.IntentionAllow)
	if len(warnings) != 1 || !strings.Contains(warnings[0], "deny every caller") {
		t.Errorf("warnings %q", warnings)
	}
	if in.Datacenter != "dc1" || len(in.Services) != 1 || len(in.Services[0].Instances) != 1 {
		t.Fatalf("input %+v", in)
	}
	if got := in.Services[0].Intentions; got.Default != ir.IntentionDeny || len(got.Rules) != 0 {
		t.Errorf("intentions %+v, want deny all", got)
	}
}
