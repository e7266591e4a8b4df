package model

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// tproxyCatalog: web's sidecar is transparent with the explicit upstream
// db; api, db, pay and audit have sidecars (virtual IPs 240.0.0.2-5).
func tproxyCatalog(mod func(*consul.Mesh)) *consul.Catalog {
	var svcs []*consul.Service
	var proxies []consul.Proxy
	for i, s := range []string{"web", "api", "db", "pay", "audit"} {
		svcs = append(svcs, &consul.Service{Name: s, Instances: []consul.Instance{{ID: s + "-1", Node: "vm-a", Datacenter: "dc1", Address: "10.0.0.1", Port: 80, Status: consul.StatusPassing}}})
		proxies = append(proxies, consul.Proxy{ID: s + "-sidecar-proxy", Name: s + "-sidecar-proxy", Node: "vm-a", Datacenter: "dc1", Address: "10.0.0.1",
			Port: 21000 + i, Service: s, ServiceID: s + "-1", LocalPort: 80, Status: consul.StatusPassing, VirtualIP: "240.0.0." + string(rune('1'+i))})
	}
	proxies[0].Mode = consul.ProxyModeTransparent
	proxies[0].Upstreams = []consul.Upstream{{Service: "db", BindPort: 9191}}
	cat := consul.NewCatalog(svcs)
	cat.Mesh = &consul.Mesh{TrustDomain: td, DefaultIntention: ir.IntentionAllow, RootsPEM: "ROOTS", Proxies: proxies,
		Protocols: map[string]string{"pay": "http"}}
	if mod != nil {
		mod(cat.Mesh)
	}
	return cat
}

func webSidecar(t *testing.T, m *ir.Model) *ir.Group {
	t.Helper()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(m.Groups, func(g ir.Group) bool { return g.Sidecar != nil && g.Sidecar.ProxyID == "web-sidecar-proxy" })
	if i < 0 {
		t.Fatal("no web sidecar group")
	}
	return &m.Groups[i]
}

type implicitView struct {
	Service, Protocol, Cluster string
	VIPs                       []string
}

func implicitOf(g *ir.Group) []implicitView {
	var out []implicitView
	for _, u := range g.Sidecar.Upstreams {
		if u.Implicit() {
			out = append(out, implicitView{u.Service, u.Protocol, u.Cluster, u.VirtualIPs})
		}
	}
	return out
}

// TestTransparentImplicitUpstreams: a transparent sidecar reaches every
// service with a sidecar that its intentions allow (an L7 intention
// counts as allowed), by its virtual IP, except its own service and its
// explicit upstreams; others pass through to original-destination unless
// mesh_destinations_only; a direct-mode sidecar gets none of it.
func TestTransparentImplicitUpstreams(t *testing.T) {
	mc := func(s string) string { return ir.MeshClusterName(s, "dc1", td) }
	all := []implicitView{
		{"api", "tcp", mc("api"), []string{"240.0.0.2"}},
		{"audit", "tcp", mc("audit"), []string{"240.0.0.5"}},
		{"pay", "http", mc("pay"), []string{"240.0.0.4"}},
	}
	for name, tc := range map[string]struct {
		mod         func(*consul.Mesh)
		want        []implicitView
		passthrough bool
		port        uint32
	}{
		"default allow":          {want: all, passthrough: true, port: 15001},
		"outbound port":          {mod: func(m *consul.Mesh) { m.Proxies[0].OutboundPort = 15100 }, want: all, passthrough: true, port: 15100},
		"mesh destinations only": {mod: func(m *consul.Mesh) { m.MeshDestinationsOnly = true }, want: all, port: 15001},
		"intentions": {mod: func(m *consul.Mesh) {
			m.DefaultIntention = ir.IntentionDeny
			m.Intentions = []*api.ServiceIntentionsConfigEntry{
				{Kind: api.ServiceIntentions, Name: "api", Sources: []*api.SourceIntention{{Name: "web", Action: api.IntentionActionAllow}}},
				{Kind: api.ServiceIntentions, Name: "audit", Sources: []*api.SourceIntention{{Name: "*", Action: api.IntentionActionDeny}}},
				{Kind: api.ServiceIntentions, Name: "pay", Sources: []*api.SourceIntention{{Name: "web", Permissions: []*api.IntentionPermission{{Action: api.IntentionActionAllow, HTTP: &api.IntentionHTTPPermission{PathPrefix: "/"}}}}}},
			}
		}, want: []implicitView{all[0], all[2]}, passthrough: true, port: 15001},
		"no virtual IP": {mod: func(m *consul.Mesh) { m.Proxies[1].VirtualIP = "" }, want: all[1:], passthrough: true, port: 15001},
	} {
		t.Run(name, func(t *testing.T) {
			m, _ := Build(tproxyCatalog(tc.mod), meshPolicy(t, "mesh {}\n"))
			g := webSidecar(t, m)
			if d := cmp.Diff(tc.want, implicitOf(g)); d != "" {
				t.Errorf("implicit upstreams (-want +got):\n%s", d)
			}
			tr := g.Sidecar.Transparent
			if tr == nil || tr.Port != tc.port || tr.Passthrough != tc.passthrough {
				t.Fatalf("transparent = %+v, want port %d passthrough %v", tr, tc.port, tc.passthrough)
			}
			hasOD := slices.Contains(g.Clusters, ir.OriginalDestinationCluster)
			if c := m.Cluster(ir.OriginalDestinationCluster); hasOD != tc.passthrough || (c != nil) != tc.passthrough || (c != nil && !c.OriginalDestination) {
				t.Errorf("original-destination in group %v, in model %+v; want %v", hasOD, c, tc.passthrough)
			}
			for _, u := range tc.want {
				if !slices.Contains(g.Clusters, u.Cluster) {
					t.Errorf("group lacks %s", u.Cluster)
				}
			}
			// The explicit upstream keeps its listener; the implicit ones have none.
			var names []string
			for _, l := range g.Sidecar.Listeners(g.Name) {
				names = append(names, l.Name)
			}
			if len(names) != 2 {
				t.Errorf("listeners %v, want the public one and db's", names)
			}
		})
	}

	// Direct mode: nothing transparent.
	m, _ := Build(tproxyCatalog(func(m *consul.Mesh) { m.Proxies[0].Mode = "" }), meshPolicy(t, "mesh {}\n"))
	g := webSidecar(t, m)
	if g.Sidecar.Transparent != nil || len(implicitOf(g)) > 0 || m.Cluster(ir.OriginalDestinationCluster) != nil {
		t.Errorf("direct sidecar got transparent parts: %+v %+v", g.Sidecar.Transparent, implicitOf(g))
	}
}
