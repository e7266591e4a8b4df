package model

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

const meshRoutesPolicy = `mesh {}
mesh_routes "api" {
  route {
    match {
      path_prefix = "/v2"
    }
    split {
      service = "api"
      weight  = 80
    }
    split {
      service = "api-canary"
      weight  = 20
    }
    timeout = "2s"
  }
  route {
    service = "api"
  }
}
`

// meshRoutesCatalog is meshCatalog with api served over HTTP and an
// api-canary with a sidecar on vm-b, which no sidecar dials directly.
func meshRoutesCatalog() *consul.Catalog {
	base := meshCatalog(consul.StatusPassing, consul.StatusPassing)
	cat := consul.NewCatalog(append(base.Services, &consul.Service{Name: "api-canary", Instances: []consul.Instance{
		{ID: "canary-1", Node: "vm-b", Datacenter: "dc1", Address: "10.0.0.2", Port: 80, Status: consul.StatusPassing}}}))
	cat.Mesh = base.Mesh
	cat.Mesh.Protocols = map[string]string{"api": "http"}
	cat.Mesh.Proxies = append(cat.Mesh.Proxies, consul.Proxy{ID: "api-canary-sidecar-proxy", Node: "vm-b", Datacenter: "dc1", Address: "10.0.0.2",
		Port: 21003, Service: "api-canary", ServiceID: "canary-1", LocalPort: 80, Status: consul.StatusPassing})
	return cat
}

// TestMeshRoutes: an HTTP upstream takes its service's mesh_routes, each
// target the mesh cluster of its service as this sidecar dials it; a
// target no sidecar dials directly gets its mesh cluster (its sidecars,
// its SPIFFE id, the dialer's leaf), in the group's clusters.
func TestMeshRoutes(t *testing.T) {
	m, warnings := Build(meshRoutesCatalog(), meshPolicy(t, meshRoutesPolicy))
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	g := groupNamed(m, ir.SidecarGroupName("vm-a", "web-sidecar-proxy"))
	if g == nil || len(g.Sidecar.Upstreams) != 1 {
		t.Fatalf("web's group = %+v; warnings %q", g, warnings)
	}
	api, canary := ir.MeshClusterName("api", "dc1", td), ir.MeshClusterName("api-canary", "dc1", td)
	u := g.Sidecar.Upstreams[0]
	if len(u.Routes) != 2 {
		t.Fatalf("routes = %+v", u.Routes)
	}
	r0, r1 := u.Routes[0], u.Routes[1]
	if r0.Name != "api/0" || r0.Match.PathPrefix != "/v2" || r0.Timeout != 2*time.Second ||
		len(r0.Clusters) != 2 || r0.Clusters[0] != (ir.WeightedCluster{Name: api, Weight: 80}) || r0.Clusters[1] != (ir.WeightedCluster{Name: canary, Weight: 20}) {
		t.Errorf("route 0 = %+v", r0)
	}
	if r1.Name != "api/1" || len(r1.Clusters) != 1 || r1.Clusters[0].Name != api {
		t.Errorf("route 1 = %+v", r1)
	}
	if got, want := strings.Join(g.Clusters, " "), canary+" "+api+" "+g.Sidecar.LocalCluster; got != want {
		t.Errorf("clusters = %s, want %s", got, want)
	}
	c := m.Cluster(canary)
	if c == nil || c.TLS == nil || c.TLS.SNI != canary || !slices.Equal(c.TLS.MatchURISANs, []string{ir.SPIFFEID(td, "dc1", "api-canary")}) || c.TLS.CertificateSecret != ir.LeafSecretPrefix+"web" {
		t.Fatalf("canary cluster = %+v", c)
	}
	if len(c.Endpoints) != 1 || c.Endpoints[0].Port != 21003 || c.Endpoints[0].Health != ir.Healthy {
		t.Errorf("canary endpoints = %+v", c.Endpoints)
	}
	// The listener Envoy gets is made of these routes.
	for _, l := range g.Sidecar.Listeners(g.Name) {
		if l.Name == ir.UpstreamListenerName(g.Name, &u) && (len(l.VirtualHosts) != 1 || len(l.VirtualHosts[0].Routes) != 2) {
			t.Errorf("upstream listener = %+v", l)
		}
	}
}

// TestMeshRoutesPerDialer: two services' sidecars dialing api route to
// their own clusters of each target (each presents its own leaf).
func TestMeshRoutesPerDialer(t *testing.T) {
	cat := meshRoutesCatalog()
	cat.Mesh.Proxies = append(cat.Mesh.Proxies, consul.Proxy{ID: "admin-sidecar-proxy", Node: "vm-c", Datacenter: "dc1", Address: "10.0.0.3",
		Port: 21002, Service: "admin", LocalPort: 80, Status: consul.StatusPassing, Upstreams: []consul.Upstream{{Service: "api", BindPort: 9191}}})
	m, _ := Build(cat, meshPolicy(t, meshRoutesPolicy))
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	canary := ir.MeshClusterName("api-canary", "dc1", td)
	for node, svc := range map[string]string{"vm-a/web": "web", "vm-c/admin": "admin"} {
		n, _, _ := strings.Cut(node, "/")
		g := groupNamed(m, ir.SidecarGroupName(n, svc+"-sidecar-proxy"))
		if g == nil {
			t.Fatalf("no group for %s", svc)
		}
		r0 := g.Sidecar.Upstreams[0].Routes[0]
		if r0.Clusters[1].Name != canary+"/"+svc {
			t.Errorf("%s routes to %q", svc, r0.Clusters[1].Name)
		}
		if c := m.Cluster(canary + "/" + svc); c == nil || c.TLS.CertificateSecret != ir.LeafSecretPrefix+svc {
			t.Errorf("%s's canary cluster = %+v", svc, c)
		}
	}
}

// TestMeshRoutesIgnored: a tcp upstream, or one in another datacenter,
// keeps one cluster and says why its mesh_routes do not apply.
func TestMeshRoutesIgnored(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*consul.Catalog)
		warn   string
	}{
		"tcp":    {func(c *consul.Catalog) { c.Mesh.Protocols = nil }, `upstream "api" is protocol "tcp", so mesh_routes "api"`},
		"remote": {func(c *consul.Catalog) { c.Mesh.Proxies[1].Upstreams[0].Datacenter = "dc2" }, `apply to upstreams in the local datacenter only`},
	} {
		t.Run(name, func(t *testing.T) {
			cat := meshRoutesCatalog()
			tc.change(cat)
			m, warnings := Build(cat, meshPolicy(t, meshRoutesPolicy))
			if err := m.Validate(); err != nil {
				t.Fatal(err)
			}
			g := groupNamed(m, ir.SidecarGroupName("vm-a", "web-sidecar-proxy"))
			if u := g.Sidecar.Upstreams[0]; u.Routes != nil {
				t.Errorf("routes = %+v", u.Routes)
			}
			if !strings.Contains(strings.Join(warnings, "\n"), tc.warn) {
				t.Errorf("warnings = %q, want %s", warnings, tc.warn)
			}
			if m.Cluster(ir.MeshClusterName("api-canary", "dc1", td)) != nil {
				t.Error("a cluster for a route target no route uses")
			}
		})
	}
}

// TestMeshRoutesTargetNotRead: in a mesh read from Consul (Endpoints
// set), a target whose connect health is not read has no endpoints yet,
// rather than every registered sidecar of it whatever their health.
func TestMeshRoutesTargetNotRead(t *testing.T) {
	cat := meshRoutesCatalog()
	cat.Mesh.Endpoints = map[string][]consul.Proxy{"api": {cat.Mesh.Proxies[0]}}
	m, warnings := Build(cat, meshPolicy(t, meshRoutesPolicy))
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	c := m.Cluster(ir.MeshClusterName("api-canary", "dc1", td))
	if c == nil || len(c.Endpoints) != 0 {
		t.Fatalf("canary cluster = %+v", c)
	}
	if !strings.Contains(strings.Join(warnings, "\n"), `service "api-canary" has no Connect sidecar`) {
		t.Errorf("warnings = %q", warnings)
	}
}

func groupNamed(m *ir.Model, name string) *ir.Group {
	for i := range m.Groups {
		if m.Groups[i].Name == name {
			return &m.Groups[i]
		}
	}
	return nil
}
