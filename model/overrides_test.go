package model

import (
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
