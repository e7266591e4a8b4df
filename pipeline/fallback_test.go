package pipeline

import (
	stdcmp "cmp"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// TestEndpointOnlyFallsBack: a change the watcher reports as
// endpoint-only but that changes more than health is built whole, and a
// health change is not; either way the world is the whole pipeline's.
func TestEndpointOnlyFallsBack(t *testing.T) {
	pol := mustPolicy(t, synthPolicy)
	other := mustPolicy(t, synthPolicy+"\nservice \"web\" {\n  connect_timeout = \"3s\"\n}\n")
	inst := func(id, addr string, tags ...string) consul.Instance {
		return consul.Instance{ID: id, Node: "n-" + id, Datacenter: "dc1", Address: addr, Port: 80, Tags: tags, Status: consul.StatusPassing, WeightPassing: 1, WeightWarning: 1}
	}
	base := func() []*consul.Service {
		return []*consul.Service{
			{Name: "api", Instances: []consul.Instance{inst("api-1", "10.0.0.1", "v1"), inst("api-2", "10.0.0.2", "v2")}},
			{Name: "web", Instances: []consul.Instance{inst("web-1", "10.0.1.1", "urlprefix-shop.example.com/web")}},
		}
	}
	edit := func(f func([]*consul.Service) []*consul.Service) *consul.Catalog { return consul.NewCatalog(f(base())) }
	tests := map[string]struct {
		cat         *consul.Catalog
		pol         *policy.Policy
		incremental bool
	}{
		"a health flip": {cat: edit(func(s []*consul.Service) []*consul.Service {
			s[0].Instances[1].Status = consul.StatusCritical
			return s
		}), incremental: true},
		"a tag that moves an instance to subset v2": {cat: edit(func(s []*consul.Service) []*consul.Service {
			s[0].Instances[0].Tags = []string{"v2"}
			return s
		})},
		"a tag that adds a tag route": {cat: edit(func(s []*consul.Service) []*consul.Service {
			s[0].Instances[0].Tags = []string{"urlprefix-shop.example.com/api", "v1"}
			return s
		})},
		"an instance added": {cat: edit(func(s []*consul.Service) []*consul.Service {
			s[0].Instances = append(s[0].Instances, inst("api-3", "10.0.0.3"))
			return s
		})},
		"the last instance gone": {cat: edit(func(s []*consul.Service) []*consul.Service {
			s[1].Instances = nil
			return s
		})},
		"an address no endpoint can have": {cat: edit(func(s []*consul.Service) []*consul.Service {
			s[0].Instances[0].Address = "api.example"
			return s
		})},
		"a service that appears": {cat: edit(func(s []*consul.Service) []*consul.Service {
			return append(s, &consul.Service{Name: "db", Instances: []consul.Instance{inst("db-1", "10.0.2.1")}})
		})},
		"another policy": {cat: edit(func(s []*consul.Service) []*consul.Service {
			s[0].Instances[1].Status = consul.StatusCritical
			return s
		}), pol: other},
		"mesh data": {cat: func() *consul.Catalog {
			c := edit(func(s []*consul.Service) []*consul.Service {
				s[0].Instances[1].Status = consul.StatusCritical
				return s
			})
			c.Mesh = &consul.Mesh{TrustDomain: "example.consul"}
			return c
		}()},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			memo := NewMemo()
			prev, err := Compute(Input{Catalog: consul.NewCatalog(base()), Policy: pol}, memo)
			if err != nil {
				t.Fatal(err)
			}
			p := stdcmp.Or(tc.pol, pol)
			whole, err := Compute(Input{Catalog: tc.cat, Policy: p}, memo.Fork())
			if err != nil {
				t.Fatal(err)
			}
			change := consul.Change{Services: []consul.ServiceKey{{Name: "api"}, {Name: "web"}}, Endpoints: true}
			got, err := Compute(Input{Catalog: tc.cat, Policy: p, Change: change}, memo)
			if err != nil {
				t.Fatal(err)
			}
			if got.Incremental != tc.incremental {
				t.Fatalf("incremental = %v, want %v", got.Incremental, tc.incremental)
			}
			sameWorld(t, name, prev, got, whole)
		})
	}
}

// TestForkAndEndpointOnly: a fork and the memo it was forked from each
// take the endpoint-only path from the same last world without seeing
// each other's: the reload gate forks while the daemon keeps serving.
func TestForkAndEndpointOnly(t *testing.T) {
	pol := mustPolicy(t, synthPolicy)
	mk := func(st consul.Status) *consul.Catalog {
		return consul.NewCatalog([]*consul.Service{{Name: "api", Instances: []consul.Instance{
			{ID: "api-1", Node: "n1", Datacenter: "dc1", Address: "10.0.0.1", Port: 80, Tags: []string{"v2"}, Status: st, WeightPassing: 1, WeightWarning: 1},
		}}})
	}
	flip := consul.Change{Services: []consul.ServiceKey{{Name: "api"}}, Endpoints: true}
	memo := NewMemo()
	prev, err := Compute(Input{Catalog: mk(consul.StatusPassing), Policy: pol}, memo)
	if err != nil {
		t.Fatal(err)
	}
	fork := memo.Fork()
	critical := mk(consul.StatusCritical)
	for name, m := range map[string]*Memo{"memo": memo, "fork": fork} {
		whole, err := Compute(Input{Catalog: critical, Policy: pol}, m.Fork())
		if err != nil {
			t.Fatal(err)
		}
		got, err := Compute(Input{Catalog: critical, Policy: pol, Change: flip}, m)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Incremental {
			t.Fatalf("%s: not incremental", name)
		}
		sameWorld(t, name, prev, got, whole)
	}
}
