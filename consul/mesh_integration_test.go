package consul

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

func proxyIDs(m *Mesh) string {
	var ids []string
	for _, p := range m.Proxies {
		ids = append(ids, p.ID+">"+p.Service)
	}
	return strings.Join(ids, ",")
}

func nextMesh(t *testing.T, w *MeshWatcher, what string, pred func(*Mesh) bool) *Mesh {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case u := <-w.Updates():
			if pred(u.Mesh) {
				return u.Mesh
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestMeshWatcherAgainstConsul: the sidecars Consul has, with their
// upstreams, the CA's trust domain and roots, Consul's default intention
// and (central) each sidecar service's leaf; a deregistered sidecar and
// its leaf go; an upstream in a datacenter that never answers holds
// nothing back. The watcher shares a catalog watcher's two query slots.
func TestMeshWatcherAgainstConsul(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client()
	for _, reg := range []*api.AgentServiceRegistration{
		{Name: "web", Port: 8080, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Proxy: &api.AgentServiceConnectProxyConfig{Upstreams: []api.Upstream{{DestinationName: "api", LocalBindPort: 9191},
				// A datacenter that does not exist must hold nothing back.
				{DestinationName: "api", Datacenter: "dc9", LocalBindPort: 9292}}}}}},
		{Name: "api", Port: 9090, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}},
		// A Connect-native gRPC server, in the first publication.
		{Name: "echo", Port: 50051, Connect: &api.AgentServiceConnect{Native: true}},
	} {
		if err := c.Agent().ServiceRegister(reg); err != nil {
			t.Fatal(err)
		}
	}
	log := zerolog.New(zerolog.NewTestWriter(t))
	budget := NewWatcher(Config{Client: c, Query: testQuery(), Logger: log, MaxQueries: 2})
	runInBackground(t, budget.Run)
	w := NewMeshWatcher(MeshConfig{Client: c, Query: testQuery(), Central: true, Budget: budget, Logger: log})
	runInBackground(t, w.Run)

	m := nextMesh(t, w, "both sidecars", func(m *Mesh) bool { return proxyIDs(m) == "api-sidecar-proxy>api,web-sidecar-proxy>web" })
	web := m.Proxies[1]
	if !slices.Equal(m.Natives, []string{"echo"}) || !slices.Contains(m.Services(), ServiceKey{Name: "echo"}) {
		t.Errorf("natives %v (services to watch %v), want echo in both", m.Natives, m.Services())
	}
	if _, ok := m.Endpoints["api@dc9"]; ok {
		t.Error("endpoints of a datacenter that never answered")
	}
	if web.LocalPort != 8080 || len(web.Upstreams) != 2 || web.Upstreams[0].Service != "api" || web.Upstreams[0].BindPort != 9191 || web.Port == 0 {
		t.Errorf("web's sidecar = %+v", web)
	}
	if !strings.HasSuffix(m.TrustDomain, ".consul") || !strings.Contains(m.RootsPEM, "BEGIN CERTIFICATE") || m.DefaultIntention != ir.IntentionAllow {
		t.Errorf("trust domain %q, roots %d bytes, default %q", m.TrustDomain, len(m.RootsPEM), m.DefaultIntention)
	}
	if eps := m.Endpoints["api"]; len(eps) != 1 || eps[0].ID != "api-sidecar-proxy" || eps[0].Port != m.Proxies[0].Port {
		t.Errorf("api's connect endpoints = %+v", eps)
	}
	if _, ok := m.Endpoints["web"]; ok {
		t.Error("web's connect health is read, but no sidecar dials web")
	}
	for _, svc := range []string{"web", "api"} {
		l := m.Leaves[svc]
		if l.ServiceURI != ir.SPIFFEID(m.TrustDomain, "dc1", svc) || !strings.Contains(l.CertPEM, "BEGIN CERTIFICATE") || len(l.KeyPEM) == 0 {
			t.Errorf("leaf of %s: uri %q, cert %d bytes, key %d bytes", svc, l.ServiceURI, len(l.CertPEM), len(l.KeyPEM))
		}
	}
	if err := c.Agent().ServiceDeregister("api-sidecar-proxy"); err != nil {
		t.Fatal(err)
	}
	m = nextMesh(t, w, "api's sidecar gone", func(m *Mesh) bool { return proxyIDs(m) == "web-sidecar-proxy>web" })
	if _, ok := m.Leaves["api"]; ok {
		t.Error("api's leaf is still followed after its last sidecar left")
	}
}

// TestMeshDefaultIntentionFromACLs: with ACLs on and default_policy
// deny, Consul's default intention is deny; a token that may not read
// the agent (403) also gets deny, and a management token reads it.
func TestMeshDefaultIntentionFromACLs(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.WithHCL(`acl {
  enabled        = true
  default_policy = "deny"
  tokens {
    initial_management = "root"
    agent              = "root"
  }
}`), consultest.WithToken("root"))
	log := zerolog.New(zerolog.NewTestWriter(t))
	for name, token := range map[string]string{"management": "root", "anonymous": "anonymous"} {
		t.Run(name, func(t *testing.T) {
			cfg := api.DefaultConfig()
			cfg.Address, cfg.Token = agent.HTTPAddr(), token
			c, err := api.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			w := NewMeshWatcher(MeshConfig{Client: c, Query: testQuery(), Logger: log})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if got := w.defaultIntention(ctx); got != ir.IntentionDeny {
				t.Fatalf("default intention %q, want deny", got)
			}
		})
	}
}

// TestFetchMeshMatchesWatcher: the one-shot read (for `plan`) is what
// the watcher publishes first.
func TestFetchMeshMatchesWatcher(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client()
	for _, reg := range []*api.AgentServiceRegistration{
		{Name: "web", Port: 8080, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Proxy: &api.AgentServiceConnectProxyConfig{Upstreams: []api.Upstream{{DestinationName: "api", LocalBindPort: 9191}}}}}},
		{Name: "api", Port: 9090, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}},
	} {
		if err := c.Agent().ServiceRegister(reg); err != nil {
			t.Fatal(err)
		}
	}
	w := NewMeshWatcher(MeshConfig{Client: c, Query: testQuery(), Logger: zerolog.New(zerolog.NewTestWriter(t))})
	runInBackground(t, w.Run)
	watched := nextMesh(t, w, "both sidecars", func(m *Mesh) bool { return len(m.Proxies) == 2 && len(m.Endpoints["api"]) == 1 })
	fetched, err := FetchMesh(context.Background(), c, false, QueryOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !equalProxies(watched.Proxies, fetched.Proxies) || !equalProxies(watched.Endpoints["api"], fetched.Endpoints["api"]) ||
		watched.TrustDomain != fetched.TrustDomain || watched.RootsPEM != fetched.RootsPEM || watched.DefaultIntention != fetched.DefaultIntention {
		t.Fatalf("fetched %+v\nwatched %+v", fetched, watched)
	}
}
