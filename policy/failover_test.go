package policy_test

import (
	"slices"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// TestFailoverTargets: each form of failover block resolves to Consul's
// targets: a subset's own failover before the service's ("*"), names
// left out meaning the failing service, subset and datacenter, and a
// "*" failover to the service's own datacenters only staying datacenter
// priorities.
func TestFailoverTargets(t *testing.T) {
	src := `
service "api" {
  subset "v1" {
    tags = ["v1"]
    failover { subset = "v2" }
  }
  subset "v2" { tags = ["v2"] }
  failover {
    service     = "api-backup"
    datacenters = ["dc1", "dc2"]
  }
}
service "db" {
  failover {
    target { service = "db-backup" }
    target { datacenter = "dc3" }
  }
}
service "cache" {
  failover { datacenters = ["dc2"] }
}
`
	doc, diags := policy.Parse("p.hcl", []byte(src))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	cfg, diags := policy.Merge(doc)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	pol := cfg.Policy
	for _, tc := range []struct {
		service, subset string
		want            []policy.FailoverTarget
	}{
		{"api", "v1", []policy.FailoverTarget{{Service: "api", Subset: "v2"}}},
		{"api", "v2", []policy.FailoverTarget{{Service: "api-backup", Datacenter: "dc1"}, {Service: "api-backup", Datacenter: "dc2"}}},
		{"api", "", []policy.FailoverTarget{{Service: "api-backup", Datacenter: "dc1"}, {Service: "api-backup", Datacenter: "dc2"}}},
		{"db", "", []policy.FailoverTarget{{Service: "db-backup"}, {Service: "db", Datacenter: "dc3"}}},
		{"cache", "", nil},
	} {
		if got := pol.Service(tc.service).FailoverFor(tc.subset); !slices.Equal(got, tc.want) {
			t.Errorf("%s subset %q fails over to %+v, want %+v", tc.service, tc.subset, got, tc.want)
		}
	}
	if got := pol.Service("cache").FailoverDatacenters; !slices.Equal(got, []string{"dc2"}) {
		t.Errorf("cache's failover datacenters %v, want [dc2] (one cluster, priorities)", got)
	}
}
