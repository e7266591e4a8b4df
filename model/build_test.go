package model

import (
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/policytest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

func TestHealthAndWeight(t *testing.T) {
	tests := map[string]struct {
		in         consul.Instance
		wantHealth ir.Health
		wantWeight uint32
	}{
		"passing uses passing weight":          {consul.Instance{Status: consul.StatusPassing, WeightPassing: 3, WeightWarning: 1}, ir.Healthy, 3},
		"warning is healthy at warning weight": {consul.Instance{Status: consul.StatusWarning, WeightPassing: 3, WeightWarning: 2}, ir.Healthy, 2},
		"warning weight zero means no traffic": {consul.Instance{Status: consul.StatusWarning, WeightPassing: 3, WeightWarning: 0}, ir.Unhealthy, 1},
		"critical":                             {consul.Instance{Status: consul.StatusCritical, WeightPassing: 3, WeightWarning: 1}, ir.Unhealthy, 3},
		"maintenance drains":                   {consul.Instance{Status: consul.StatusMaintenance, WeightPassing: 1, WeightWarning: 1}, ir.Draining, 1},
		"unset weights default to 1":           {consul.Instance{Status: consul.StatusPassing}, ir.Healthy, 1},
		"huge weight is clamped":               {consul.Instance{Status: consul.StatusPassing, WeightPassing: 1 << 20, WeightWarning: 1}, ir.Healthy, maxWeight},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h, w := healthAndWeight(tc.in)
			if h != tc.wantHealth || w != tc.wantWeight {
				t.Fatalf("got %v/%d, want %v/%d", h, w, tc.wantHealth, tc.wantWeight)
			}
		})
	}
}

func TestBuildFollowsCatalog(t *testing.T) {
	svc := func(name string, addrs ...string) *consul.Service {
		s := &consul.Service{Name: name}
		for _, a := range addrs {
			s.Instances = append(s.Instances, consul.Instance{ID: a, Address: a, Port: 80, Status: consul.StatusPassing, Datacenter: "dc1"})
		}
		return s
	}
	before, _ := Build(consul.NewCatalog([]*consul.Service{svc("web", "10.0.0.1", "10.0.0.2"), svc("api", "10.0.0.3")}), nil)
	after, _ := Build(consul.NewCatalog([]*consul.Service{svc("web", "10.0.0.2")}), nil)

	if got := clusterNames(before); got != "api,web" {
		t.Fatalf("clusters before = %s", got)
	}
	if got := clusterNames(after); got != "web" {
		t.Fatalf("clusters after api disappeared = %s", got)
	}
	if eps := after.Cluster("web").Endpoints; len(eps) != 1 || eps[0].Address.String() != "10.0.0.2" {
		t.Fatalf("web endpoints after deregistration = %+v", eps)
	}
	if err := after.Validate(); err != nil {
		t.Fatal(err)
	}
}

func clusterNames(m *ir.Model) string {
	s := ""
	for i, c := range m.Clusters {
		if i > 0 {
			s += ","
		}
		s += c.Name
	}
	return s
}

// TestZoneScopedAddressesAreSkipped: a link-local IPv6 address with a zone
// (fe80::1%eth0) names an interface of the instance's host; it is skipped
// with a warning, never served as an endpoint.
func TestZoneScopedAddressesAreSkipped(t *testing.T) {
	cat := consul.NewCatalog([]*consul.Service{{Name: "web", Instances: []consul.Instance{
		{ID: "a", Address: "fe80::1%eth0", Port: 80, Status: consul.StatusPassing},
		{ID: "b", Address: "fd00::2", Port: 80, Status: consul.StatusPassing},
	}}})
	m, warnings := Build(cat, nil)
	if eps := m.Cluster("web").Endpoints; len(eps) != 1 || eps[0].Address.String() != "fd00::2" {
		t.Errorf("web endpoints = %+v, want fd00::2 only", eps)
	}
	if !strings.Contains(strings.Join(warnings, "\n"), `"fe80::1%eth0" is scoped to a network interface`) {
		t.Errorf("warnings = %q, want one naming the zone-scoped address", warnings)
	}
}

// TestServiceNamedLikeASubsetHijacksNothing: a Consul service literally
// named api.v2 beside subset v2 of service api would share cluster
// api.v2; it is a reported conflict, and the cluster serves neither's
// instances (an attacker's registration cannot take the subset's traffic).
func TestServiceNamedLikeASubsetHijacksNothing(t *testing.T) {
	cfg := policytest.Config(t, "p.hcl", []byte("export_all_services = true\nservice \"api\" {\n  subset \"v2\" {\n    tags = [\"v2\"]\n  }\n}\n"))
	cat := consul.NewCatalog([]*consul.Service{
		{Name: "api", Instances: []consul.Instance{{ID: "a", Address: "10.0.0.1", Port: 80, Status: consul.StatusPassing, Tags: []string{"v2"}}}},
		{Name: "api.v2", Instances: []consul.Instance{{ID: "evil", Address: "192.0.2.66", Port: 80, Status: consul.StatusPassing}}},
	})
	m, warnings := Build(cat, cfg.Policy)
	c := m.Cluster("api.v2")
	if c == nil || len(c.Endpoints) != 0 {
		t.Fatalf("cluster api.v2 = %+v, want it served with no endpoints", c)
	}
	if !strings.Contains(strings.Join(warnings, "\n"), `cluster "api.v2" is both subset "v2" of service "api" and Consul service "api.v2"`) &&
		!strings.Contains(strings.Join(warnings, "\n"), `cluster "api.v2" is both Consul service "api.v2" and subset "v2" of service "api"`) {
		t.Errorf("warnings = %q, want the clash named", warnings)
	}
	if eps := m.Cluster("api").Endpoints; len(eps) != 1 || eps[0].Address.String() != "10.0.0.1" {
		t.Errorf("cluster api = %+v, want its own instance", eps)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
}
