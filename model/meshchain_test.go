package model

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// TestUpstreamOverridesOnlyForTheirDownstream: web's service-defaults
// upstream_config.overrides for api change how web's sidecars dial api, as
// in Consul, and nothing else: admin's sidecars and the edge's cluster
// api keep api's own settings (issue 39, item 4).
func TestUpstreamOverridesOnlyForTheirDownstream(t *testing.T) {
	cat := meshCatalog(consul.StatusPassing, consul.StatusPassing)
	mesh := *cat.Mesh
	mesh.Proxies = append(mesh.Proxies, consul.Proxy{ID: "admin-sidecar-proxy", Name: "admin-sidecar-proxy", Node: "vm-b", Datacenter: "dc1", Address: "10.0.0.2",
		Port: 21002, Service: "admin", ServiceID: "admin-1", LocalPort: 80, Status: consul.StatusPassing, Upstreams: []consul.Upstream{{Service: "api", BindPort: 9191}}})
	three := 3
	mesh.UpstreamOverrides = map[string][]*api.UpstreamConfig{"web": {{Name: "api", ConnectTimeoutMs: 7000,
		Limits: &api.UpstreamLimits{MaxConnections: &three}, PassiveHealthCheck: &api.PassiveHealthCheck{MaxFailures: 4}}}}
	cat.Mesh = &mesh
	m, warnings := Build(cat, meshPolicy(t, "mesh {}\nexport_all_services = true\nservice \"api\" {}\n"))
	if err := m.Validate(); err != nil {
		t.Fatal(err, warnings)
	}
	base := ir.MeshClusterName("api", "dc1", td)
	web, admin, edge := m.Cluster(base+"/web"), m.Cluster(base+"/admin"), m.Cluster("api")
	if web == nil || admin == nil || edge == nil {
		t.Fatalf("clusters: %s", clusterNames(m))
	}
	if web.ConnectTimeout != 7*time.Second || web.CircuitBreaker == nil || web.CircuitBreaker.MaxConnections != 3 || web.OutlierDetection == nil || web.OutlierDetection.Consecutive5xx != 4 {
		t.Errorf("web's cluster of api: timeout %v, circuit breaker %+v, outlier detection %+v; want web's overrides (7s, 3 connections, 4 failures)", web.ConnectTimeout, web.CircuitBreaker, web.OutlierDetection)
	}
	for _, c := range []*ir.Cluster{admin, edge} {
		if c.ConnectTimeout == 7*time.Second || c.CircuitBreaker != nil || c.OutlierDetection != nil {
			t.Errorf("%s took web's overrides: timeout %v, circuit breaker %+v, outlier detection %+v", c.Name, c.ConnectTimeout, c.CircuitBreaker, c.OutlierDetection)
		}
	}
}

// TestMeshSubsetClusters: a mesh_routes split over subsets makes one mesh
// cluster per subset, named (and SNI'd) as Consul names them, whose
// endpoints are the sidecars whose own registration has the subset's tags;
// the upstream's own cluster, which no route targets, is not dialed.
func TestMeshSubsetClusters(t *testing.T) {
	cat := meshCatalog(consul.StatusPassing, consul.StatusPassing)
	mesh := *cat.Mesh
	mesh.Proxies = slices.Clone(mesh.Proxies)
	for i := range mesh.Proxies {
		switch {
		case mesh.Proxies[i].Service == "api" && mesh.Proxies[i].Node == "vm-a":
			mesh.Proxies[i].Tags = []string{"v1"}
		case mesh.Proxies[i].Service == "api":
			mesh.Proxies[i].Tags = []string{"v2"}
		case mesh.Proxies[i].Service == "web":
			mesh.Proxies[i].Upstreams[0].Protocol = "http"
		}
	}
	cat.Mesh = &mesh
	m, warnings := Build(cat, meshPolicy(t, `mesh {}
service "api" {
  subset "v1" {
    tags = ["v1"]
  }
  subset "v2" {
    tags = ["v2"]
  }
}
mesh_routes "api" {
  route {
    split {
      service = "api"
      subset  = "v1"
      weight  = 90
    }
    split {
      service = "api"
      subset  = "v2"
      weight  = 10
    }
  }
}
`))
	if err := m.Validate(); err != nil {
		t.Fatal(err, warnings)
	}
	for sub, addr := range map[string]string{"v1": "10.0.0.1", "v2": "10.0.0.2"} {
		name := ir.MeshSubsetClusterName(sub, "api", "dc1", td)
		c := m.Cluster(name)
		if c == nil {
			t.Fatalf("no cluster %s; clusters: %s", name, clusterNames(m))
		}
		if c.TLS == nil || c.TLS.SNI != name || len(c.TLS.MatchURISANs) != 1 || c.TLS.MatchURISANs[0] != ir.SPIFFEID(td, "dc1", "api") {
			t.Errorf("%s TLS = %+v; want SNI %s and api's SPIFFE id", name, c.TLS, name)
		}
		if len(c.Endpoints) != 1 || c.Endpoints[0].Address.String() != addr {
			t.Errorf("%s endpoints = %+v, want the sidecar at %s", name, c.Endpoints, addr)
		}
	}
	if c := m.Cluster(ir.MeshClusterName("api", "dc1", td)); c != nil {
		t.Errorf("the upstream's own cluster %s is made though no route targets it", c.Name)
	}
}
