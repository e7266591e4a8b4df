package consul

import (
	"context"
	"sync"
	"testing"
	"time"

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

// TestMeshWatcherLabelsQueriesByDatacenter: the connect health of a target
// in another datacenter is reported to OnQuery with that datacenter, and
// the local queries with "": an unreachable other datacenter (the local
// agent answers its queries with errors) must not read as the local
// Consul being down (the bridge's consul_up and reconnect hold). Every
// query was labelled local before.
func TestMeshWatcherLabelsQueriesByDatacenter(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client()
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{Name: "api", Port: 9090,
		Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	failed := map[string][]string{} // endpoint -> datacenters of its failed queries
	ok := map[string][]string{}
	record := func(endpoint, dc string, err error, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed[endpoint] = append(failed[endpoint], dc)
		} else {
			ok[endpoint] = append(ok[endpoint], dc)
		}
	}
	w := NewMeshWatcher(MeshConfig{Client: c, Query: testQuery(), Targets: []ServiceKey{{Name: "api"}, {Name: "api", Datacenter: "dc-gone"}},
		Logger: zerolog.New(zerolog.NewTestWriter(t)), OnQuery: record})
	runInBackground(t, w.Run)
	nextMesh(t, w, "api's local connect endpoint", func(m *Mesh) bool { return len(m.Endpoints["api"]) == 1 })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(failed["health_connect"])
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no failed health_connect query for the target in dc-gone")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for endpoint, dcs := range failed {
		for _, dc := range dcs {
			if dc != "dc-gone" {
				t.Errorf("a failed %s query is labelled %q, want dc-gone (the only datacenter that fails)", endpoint, dc)
			}
		}
	}
	for endpoint, dcs := range ok {
		for _, dc := range dcs {
			if dc != "" {
				t.Errorf("a local %s query is labelled %q, want \"\"", endpoint, dc)
			}
		}
	}
}
