package bridge_test

import (
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// TestTerminatingGatewayWildcardMatchesConsulXDS (issue 42): a
// terminating gateway linked with the wildcard ("*") and, explicitly,
// ext2 with its own TLS files gets from the bridge what Consul 1.15.4's
// own xDS server gives it: a chain per service Consul's catalog expanded
// the wildcard to, ext2's with its explicit settings, the same clusters
// and endpoints. A service registered later joins both.
func TestTerminatingGatewayWildcardMatchesConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	c := agent.Client()
	register := func(name string, port int) {
		t.Helper()
		if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: "external", Address: "127.0.0.9", NodeMeta: map[string]string{"external-node": "true"},
			Service: &api.AgentService{ID: name, Service: name, Port: port}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	register("ext1", 5432)
	register("ext2", 6443)
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{Kind: api.ServiceKindTerminatingGateway, ID: "tgw", Name: "tgw", Address: "127.0.0.1", Port: 9443}); err != nil {
		t.Fatal(err)
	}
	writeEntries(t, agent, &api.TerminatingGatewayConfigEntry{Kind: api.TerminatingGateway, Name: "tgw", Services: []api.LinkedService{
		{Name: "*"},
		{Name: "ext2", CAFile: "/etc/tgw/ext2-ca.pem", SNI: "ext2.example.com"},
	}})
	gs, _, err := c.Catalog().GatewayServices("tgw", nil)
	if err != nil {
		t.Fatal(err)
	}
	var linked []string
	for _, g := range gs {
		linked = append(linked, g.Service.Name)
	}
	t.Logf("Consul links %v", linked)
	h := startMeshBridge(t, agent, "export_all_services = false\nmesh {}\n")
	compare := func(want int) {
		t.Helper()
		_, consul := dialGateway(t, agent.GRPCAddr(), "tgw", want)
		_, ours := dialGateway(t, h.daemon.XDSAddr().String(), "tgw", want)
		cv, bv := gatewayViewOf(consul), gatewayViewOf(ours)
		t.Logf("Consul: %+v", cv)
		t.Logf("bridge: %+v", bv)
		if !slices.Equal(cv.chains, bv.chains) || len(bv.chains) != want {
			t.Errorf("filter chains (want %d):\nConsul %q\nbridge %q", want, cv.chains, bv.chains)
		}
		if !slices.Equal(cv.clusters, bv.clusters) {
			t.Errorf("clusters:\nConsul %q\nbridge %q", cv.clusters, bv.clusters)
		}
		if !slices.Equal(cv.endpoints, bv.endpoints) {
			t.Errorf("endpoints: Consul %v, bridge %v", cv.endpoints, bv.endpoints)
		}
	}
	compare(len(linked))
	register("ext3", 7000)
	compare(len(linked) + 1)
}
