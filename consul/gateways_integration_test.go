package consul

import (
	"context"
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// TestGatewaysFetchedAndWatched: a terminating and a mesh gateway
// registered on a real Consul are listed by the watcher and by the
// one-shot read (`plan`) alike, with their kind and port; the one-shot
// read also has the terminating gateway's links (from its entry) and, in
// central mode, the linked services' leaves, which the watcher follows
// once told (SetLeafServices); the catalog targets include the linked
// services.
func TestGatewaysFetchedAndWatched(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client()
	for _, reg := range []*api.AgentServiceRegistration{
		{Kind: api.ServiceKindTerminatingGateway, ID: "tgw", Name: "tgw", Port: 9443},
		{Kind: api.ServiceKindMeshGateway, ID: "mgw", Name: "mgw", Port: 8443},
	} {
		if err := c.Agent().ServiceRegister(reg); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.ConfigEntries().Set(&api.TerminatingGatewayConfigEntry{Kind: api.TerminatingGateway, Name: "tgw", Services: []api.LinkedService{{Name: "ext1", CAFile: "/ca.pem"}}}, nil); err != nil {
		t.Fatal(err)
	}
	w := NewMeshWatcher(MeshConfig{Client: c, Query: testQuery(), Central: true, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	w.SetLeafServices([]string{"ext1"})
	runInBackground(t, w.Run)
	watched := nextMesh(t, w, "both gateways and ext1's leaf", func(m *Mesh) bool { return len(m.Proxies) == 2 && m.Leaves["ext1"].CertPEM != "" })
	fetched, err := FetchMesh(context.Background(), c, true, QueryOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !equalProxies(watched.Proxies, fetched.Proxies) {
		t.Fatalf("fetched %+v\nwatched %+v", fetched.Proxies, watched.Proxies)
	}
	kinds := []string{fetched.Proxies[0].Kind, fetched.Proxies[1].Kind}
	slices.Sort(kinds)
	if !slices.Equal(kinds, []string{KindMeshGateway, KindTerminatingGateway}) {
		t.Errorf("kinds %v", kinds)
	}
	if got := fetched.TerminatingGateways["tgw"]; len(got) != 1 || got[0] != (LinkedService{Name: "ext1", CAFile: "/ca.pem"}) {
		t.Errorf("links %+v", got)
	}
	if fetched.Leaves["ext1"].CertPEM == "" || len(fetched.Leaves["ext1"].KeyPEM) == 0 || len(fetched.Leaves) != 1 {
		t.Errorf("leaves %v, want ext1's only", fetched.Leaves)
	}
	// With a mesh gateway, the linked service's Connect endpoints (the
	// terminating gateway) are read too.
	if eps := fetched.Endpoints["ext1"]; len(eps) != 1 || eps[0].ID != "tgw" || eps[0].Kind != KindTerminatingGateway {
		t.Errorf("ext1's Connect endpoints %+v, want the terminating gateway", eps)
	}
	if got := fetched.CatalogTargets(); !slices.Contains(got, ServiceKey{Name: "ext1"}) {
		t.Errorf("catalog targets %v lack ext1", got)
	}
}

// TestFetchMeshExpandsWildcardLinks: the one-shot read (plan) links what
// Consul expands a terminating gateway's wildcard to, as the daemon's
// config-entry watcher does: every service of the namespace, an explicit
// link with its own settings.
func TestFetchMeshExpandsWildcardLinks(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client()
	for _, name := range []string{"ext1", "ext2"} {
		if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: "external", Address: "127.0.0.9",
			Service: &api.AgentService{ID: name, Service: name, Port: 5432}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{Kind: api.ServiceKindTerminatingGateway, ID: "tgw", Name: "tgw", Port: 9443}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.ConfigEntries().Set(&api.TerminatingGatewayConfigEntry{Kind: api.TerminatingGateway, Name: "tgw",
		Services: []api.LinkedService{{Name: "*"}, {Name: "ext2", SNI: "ext2.example.com"}}}, nil); err != nil {
		t.Fatal(err)
	}
	fetched, err := FetchMesh(context.Background(), c, false, QueryOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []LinkedService{{Name: "ext1"}, {Name: "ext2", SNI: "ext2.example.com"}}
	if got := fetched.TerminatingGateways["tgw"]; !slices.Equal(got, want) {
		t.Errorf("links %+v, want Consul's expansion %+v", got, want)
	}
}
