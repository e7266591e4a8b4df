package pipeline

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
)

// oddMutate changes one to three services' instances the ways Consul
// data can change that the differential test's own generator (mutate)
// never tries: an instance's node, node meta (its zone), meta, port or
// datacenter; weights of zero, negative or over Consul's 65535 bound; a
// status the bridge does not know or none; checks alone; a service left
// with no instance; two instances on one address and port. A quarter of
// the time the Change names a service that did not change: the
// endpoint-only path must go by the catalogs it compares, not by what the
// watcher said.
func oddMutate(rng *rand.Rand, cat *consul.Catalog) (*consul.Catalog, consul.Change, string) {
	services := slices.Clone(cat.Services)
	var names []consul.ServiceKey
	what := ""
	for range 1 + rng.IntN(3) {
		if len(services) == 0 {
			break
		}
		i := rng.IntN(len(services))
		s := *services[i]
		s.Instances = slices.Clone(s.Instances)
		names = append(names, consul.ServiceKey{Datacenter: s.Datacenter, Name: s.Name})
		if len(s.Instances) == 0 {
			continue
		}
		in := &s.Instances[rng.IntN(len(s.Instances))]
		weights := []int{0, 1, 70000, -3}
		switch rng.IntN(11) {
		case 0:
			in.Node += "-moved"
			what += " node"
		case 1:
			in.NodeMeta = map[string]string{"zone": fmt.Sprintf("z%d", rng.IntN(3))}
			what += " zone"
		case 2:
			in.Meta = map[string]string{"track": []string{"stable", "canary"}[rng.IntN(2)]}
			what += " meta"
		case 3:
			in.Port = 8000 + rng.IntN(3)
			what += " port"
		case 4:
			in.Datacenter = []string{"dc1", "dc2", ""}[rng.IntN(3)]
			what += " datacenter"
		case 5:
			in.WeightPassing, in.WeightWarning = weights[rng.IntN(len(weights))], weights[rng.IntN(len(weights))]
			what += " weights"
		case 6:
			in.Status = consul.Status([]string{"", "bogus", "warning", "maintenance"}[rng.IntN(4)])
			what += " odd status"
		case 7:
			in.Checks = append(slices.Clone(in.Checks), consul.Check{ID: "x", Name: "n", Status: "critical"})
			what += " checks alone"
		case 8:
			s.Instances = nil
			what += " no instances"
		case 9:
			dup := *in
			dup.ID += "-dup"
			s.Instances = append(s.Instances, dup)
			// The watcher's order (consul.NewService): by node, then id.
			slices.SortFunc(s.Instances, func(a, b consul.Instance) int {
				return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID))
			})
			what += " same address twice"
		default:
			in.Status, in.WeightWarning = consul.StatusWarning, rng.IntN(3)
			what += " warning"
		}
		services[i] = &s
	}
	if rng.IntN(4) == 0 && len(cat.Services) > 0 {
		names = []consul.ServiceKey{{Datacenter: cat.Services[0].Datacenter, Name: cat.Services[0].Name}}
		what += " (the Change names another service)"
	}
	slices.SortFunc(names, func(a, b consul.ServiceKey) int {
		return cmp.Or(cmp.Compare(a.Datacenter, b.Datacenter), cmp.Compare(a.Name, b.Name))
	})
	ch := consul.Change{Services: slices.Compact(names), Endpoints: true}
	return &consul.Catalog{Services: services, Mesh: cat.Mesh}, ch, what
}

// TestEndpointOnlyOddChanges: for every world without Connect (with it,
// the whole pipeline always runs), 6 seeds × 30 steps of oddMutate, a
// fifth of them through reconnect_hold's rewrite as the daemon loop
// applies it, each computed by the endpoint-only path and whole on a
// fork of the same memo: the same world, the same errors.
func TestEndpointOnlyOddChanges(t *testing.T) {
	taken, steps := 0, 0
	for _, wc := range worldCases(t) {
		if wc.cat(rand.New(rand.NewPCG(0, 0))).Mesh != nil {
			continue
		}
		t.Run(wc.name, func(t *testing.T) {
			for seed := range uint64(6) {
				rng := rand.New(rand.NewPCG(seed, 99))
				memo := NewMemo()
				cat := wc.cat(rng)
				prev, err := Compute(Input{Catalog: cat, Policy: wc.pol}, memo)
				if err != nil {
					t.Fatal(err)
				}
				served := cat
				for step := range 30 {
					next, ch, what := oddMutate(rng, cat)
					in := next
					if rng.IntN(5) == 0 {
						in, _ = model.HoldDowngrades(served, next, func(string) bool { return true })
						what += " (held)"
					}
					whole, werr := Compute(Input{Catalog: in, Policy: wc.pol}, memo.Fork())
					got, gerr := Compute(Input{Catalog: in, Policy: wc.pol, Change: ch}, memo)
					where := fmt.Sprintf("seed %d step %d:%s", seed, step, what)
					if fmt.Sprint(werr) != fmt.Sprint(gerr) {
						t.Fatalf("%s: error %v, whole: %v", where, gerr, werr)
					}
					steps++
					if gerr != nil {
						cat = next
						continue
					}
					sameWorld(t, where, prev, got, whole)
					if got.Incremental {
						taken++
					}
					cat, prev, served = next, got, in
				}
			}
		})
	}
	// Health-only steps (odd statuses, weights, checks, warnings) take
	// the path; a test that never took it would compare nothing.
	if taken == 0 || taken == steps {
		t.Errorf("%d of %d steps took the endpoint-only path; want some and not all", taken, steps)
	}
}

// TestTagChangeReportedAsEndpointsIsBuiltWhole: the watcher reports an
// instance's new tags as an endpoint change of its service (the same
// target, read before). A tag route then adds a route; the pipeline must
// build that world whole (Incremental false) and serve the new route,
// whatever the Change said (World.EndpointsOnly only repeats it).
func TestTagChangeReportedAsEndpointsIsBuiltWhole(t *testing.T) {
	pol := mustPolicy(t, synthPolicy)
	inst := func(tags ...string) consul.Instance {
		return consul.Instance{ID: "web-1", Node: "n1", Datacenter: "dc1", Address: "10.0.1.1", Port: 80, Tags: tags, Status: consul.StatusPassing}
	}
	before := consul.NewCatalog([]*consul.Service{{Name: "web", Instances: []consul.Instance{inst()}}})
	after := consul.NewCatalog([]*consul.Service{{Name: "web", Instances: []consul.Instance{inst("urlprefix-blog.example.com/web")}}})
	memo := NewMemo()
	w0, err := Compute(Input{Catalog: before, Policy: pol}, memo)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := Compute(Input{Catalog: after, Policy: pol}, memo.Fork())
	if err != nil {
		t.Fatal(err)
	}
	w1, err := Compute(Input{Catalog: after, Policy: pol, Change: consul.Change{Services: []consul.ServiceKey{{Name: "web"}}, Endpoints: true}}, memo)
	if err != nil {
		t.Fatal(err)
	}
	if w1.Incremental {
		t.Fatal("a tag change took the endpoint-only path")
	}
	sameWorld(t, "the tag change", w0, w1, whole)
	r0, r1 := w0.Output.Groups["edge"].Routes, w1.Output.Groups["edge"].Routes
	if len(r0) == len(r1) && r0[0] == r1[0] {
		t.Fatal("the tag route did not change edge's route configuration; the test needs a world where it does")
	}
}
