package consul

import (
	"context"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// TestMeshWatcherTargets: the connect health of extra targets (services
// mesh_routes send requests to, which no sidecar dials) is followed from
// the first publication, a target set at run time is followed and one
// dropped is forgotten; FetchMesh reads the same for plan.
func TestMeshWatcherTargets(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client()
	for _, reg := range []*api.AgentServiceRegistration{
		{Name: "web", Port: 8080, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Proxy: &api.AgentServiceConnectProxyConfig{Upstreams: []api.Upstream{{DestinationName: "api", LocalBindPort: 9191}}}}}},
		{Name: "api", Port: 9090, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}},
		{Name: "canary", Port: 9091, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}},
		{Name: "v2", Port: 9092, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}},
	} {
		if err := c.Agent().ServiceRegister(reg); err != nil {
			t.Fatal(err)
		}
	}
	w := NewMeshWatcher(MeshConfig{Client: c, Query: testQuery(), Targets: []ServiceKey{{Name: "canary"}}, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	runInBackground(t, w.Run)
	m := nextMesh(t, w, "four sidecars", func(m *Mesh) bool { return len(m.Proxies) == 4 })
	if eps := m.Endpoints["canary"]; len(eps) != 1 || eps[0].ID != "canary-sidecar-proxy" {
		t.Errorf("canary's connect endpoints in the first publication = %+v", eps)
	}
	if _, ok := m.Endpoints["v2"]; ok {
		t.Error("v2's connect health is read before it is a target")
	}
	fetched, err := FetchMesh(context.Background(), c, false, QueryOptions{}, []ServiceKey{{Name: "canary"}})
	if err != nil {
		t.Fatal(err)
	}
	if !equalProxies(fetched.Endpoints["canary"], m.Endpoints["canary"]) {
		t.Errorf("fetched canary endpoints %+v, watched %+v", fetched.Endpoints["canary"], m.Endpoints["canary"])
	}

	w.SetTargets([]ServiceKey{{Name: "v2"}})
	m = nextMesh(t, w, "v2 followed, canary dropped", func(m *Mesh) bool {
		_, canary := m.Endpoints["canary"]
		return len(m.Endpoints["v2"]) == 1 && !canary
	})
	if eps := m.Endpoints["api"]; len(eps) != 1 {
		t.Errorf("api's connect endpoints (a registered upstream) = %+v", eps)
	}
}
