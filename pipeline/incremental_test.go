package pipeline

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/policytest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// The endpoint-only path must compute exactly the world the whole
// pipeline computes. These tests run random sequences of changes, each
// computed twice: with the watcher's Change on the memo of the sequence
// (the daemon's way), and whole on a fork of that memo taken just before
// (so the translator's memo holds the same objects). The worlds must be
// equal, resource objects included: an unchanged resource is the same
// object on both paths, which is what keeps its version in serving.

// synthPolicy exercises what feeds endpoints: subsets by tag and meta, a
// failover to other services and datacenters, a subset's own failover,
// datacenter tiers, only_passing, tag routes, proxyless clients with a
// least_request service (whose proxyless copy has its endpoints) and a
// cluster two things make (service "api" subset "v2" and Consul's
// "api.v2").
const synthPolicy = `
export_all_services = true
service "api" {
  lb_policy = "least_request"
  subset "v1" {
    tags = ["v1"]
    failover { subset = "v2" }
  }
  subset "v2" { tags = ["v2"] }
  subset "stable" { meta = { track = "stable" } }
  failover {
    service     = "api-backup"
    datacenters = ["dc1", "dc2"]
  }
}
service "db" {
  only_passing = true
  failover {
    target { service = "db-backup" }
    target { datacenter = "dc3" }
  }
}
service "cache" {
  failover { datacenters = ["dc2"] }
}
proxy "grpc-*" {
  proxyless = true
}
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "shop" {
      domains = ["shop.example.com"]
      route {
        match { path_prefix = "/api/" }
        split {
          service = "api"
          weight  = 90
        }
        split {
          service = "api"
          subset  = "v2"
          weight  = 10
        }
      }
      route {
        service = "web"
      }
    }
    tag_routes {
      format = "fabio"
    }
  }
}
grpc_service "api" {
  route {
    service = "api"
    subset  = "v1"
  }
}
`

// synthKeys are the services of the synthetic catalog, each present or
// not at random.
var synthKeys = []consul.ServiceKey{
	{Name: "api"}, {Name: "api.v2"}, {Name: "api-backup"}, {Datacenter: "dc1", Name: "api-backup"},
	{Datacenter: "dc2", Name: "api-backup"}, {Datacenter: "dc2", Name: "api"}, {Name: "db"},
	{Name: "db-backup"}, {Datacenter: "dc3", Name: "db"}, {Name: "cache"}, {Datacenter: "dc2", Name: "cache"},
	{Name: "web"}, {Name: "idle"},
}

var synthStatuses = []consul.Status{consul.StatusPassing, consul.StatusWarning, consul.StatusCritical, consul.StatusMaintenance}

// synthInstance is instance i of k, with random tags, meta, health and
// weights; now and then an address or port no endpoint can have.
func synthInstance(rng *rand.Rand, k consul.ServiceKey, i int) consul.Instance {
	dc := k.Datacenter
	if dc == "" {
		dc = "dc1"
	}
	in := consul.Instance{
		ID: fmt.Sprintf("%s-%d", k.Name, i), Node: fmt.Sprintf("%s-node-%d", dc, i), Datacenter: dc,
		Address: fmt.Sprintf("10.%d.%d.%d", rng.IntN(4), rng.IntN(250), rng.IntN(250)), Port: 8000 + rng.IntN(100),
		NodeMeta: map[string]string{"zone": fmt.Sprintf("z%d", rng.IntN(2))},
		Status:   synthStatuses[rng.IntN(len(synthStatuses))], WeightPassing: rng.IntN(4), WeightWarning: rng.IntN(3),
	}
	for _, tag := range []string{"v1", "v2", "http"} {
		if rng.IntN(2) == 0 {
			in.Tags = append(in.Tags, tag)
		}
	}
	if k.Name == "web" && rng.IntN(2) == 0 {
		in.Tags = append(in.Tags, "urlprefix-shop.example.com/web")
	}
	slices.Sort(in.Tags)
	if rng.IntN(2) == 0 {
		in.Meta = map[string]string{"track": "stable"}
	}
	switch rng.IntN(12) {
	case 0:
		in.Address = "host.example"
	case 1:
		in.Port = 0
	}
	in.Checks = []consul.Check{{ID: "serfHealth", Status: string(consul.StatusPassing)}, {ID: "service:" + in.ID, Status: string(in.Status)}}
	return in
}

// synthCatalog is a random catalog of synthKeys.
func synthCatalog(rng *rand.Rand) *consul.Catalog {
	var services []*consul.Service
	for _, k := range synthKeys {
		if rng.IntN(5) == 0 {
			continue
		}
		s := &consul.Service{Name: k.Name, Datacenter: k.Datacenter}
		for i := range rng.IntN(5) {
			s.Instances = append(s.Instances, synthInstance(rng, k, i))
		}
		services = append(services, s)
	}
	return consul.NewCatalog(services)
}

// A change is one step of a sequence: the next catalog, the Change the
// watcher would report, and whether the endpoint-only path must take it.
type change struct {
	what    string
	cat     *consul.Catalog
	change  consul.Change
	healthy bool // only health and weights changed
}

// mutate changes one or two services of cat the way Consul can: mostly
// health and weights, sometimes an instance that comes or goes, a tag, an
// address, and now and then a service that comes or goes.
func mutate(rng *rand.Rand, cat *consul.Catalog) change {
	if len(cat.Services) == 0 || rng.IntN(12) == 0 {
		return structural(rng, cat)
	}
	services := slices.Clone(cat.Services)
	out := change{change: consul.Change{Endpoints: true}}
	for range 1 + rng.IntN(2) {
		i := rng.IntN(len(services))
		s := *services[i]
		s.Instances = slices.Clone(s.Instances)
		op := rng.IntN(10)
		if len(s.Instances) == 0 {
			op = 6 // only an instance can come
		}
		switch {
		case op < 4:
			in := &s.Instances[rng.IntN(len(s.Instances))]
			in.Status = synthStatuses[rng.IntN(len(synthStatuses))]
			in.Checks = []consul.Check{{ID: "service:" + in.ID, Status: string(in.Status)}}
			out.what += " health(" + s.Name + ")"
		case op < 6:
			in := &s.Instances[rng.IntN(len(s.Instances))]
			in.WeightPassing, in.WeightWarning = rng.IntN(4), rng.IntN(3)
			out.what += " weights(" + s.Name + ")"
		case op < 7:
			s.Instances = append(s.Instances, synthInstance(rng, consul.ServiceKey{Datacenter: s.Datacenter, Name: s.Name}, 10+rng.IntN(90)))
			out.what = out.what + " add(" + s.Name + ")"
		case op < 8:
			s.Instances = slices.Delete(s.Instances, 0, 1)
			out.what = out.what + " remove(" + s.Name + ")"
		case op < 9:
			in := &s.Instances[rng.IntN(len(s.Instances))]
			// Always a new tag: a "change" to the same tags is none.
			in.Tags = append(slices.Clone(in.Tags), fmt.Sprintf("canary-%d", rng.IntN(1000)))
			slices.Sort(in.Tags)
			out.what = out.what + " tags(" + s.Name + ")"
		default:
			in := &s.Instances[rng.IntN(len(s.Instances))]
			in.Address = slices.DeleteFunc([]string{"10.9.9.9", "host.example", "fe80::1%eth0"}, func(a string) bool { return a == in.Address })[rng.IntN(2)]
			out.what = out.what + " address(" + s.Name + ")"
		}
		services[i] = &s
		out.change = out.change.Merge(consul.Change{Services: []consul.ServiceKey{{Datacenter: s.Datacenter, Name: s.Name}}, Endpoints: true})
	}
	out.cat = &consul.Catalog{Services: services, Mesh: cat.Mesh}
	// Two steps may undo each other (an instance added, then removed):
	// what counts is how the catalogs differ.
	out.healthy = onlyHealthDiffers(cat, out.cat)
	return out
}

// onlyHealthDiffers reports whether a and b have the same services and
// instances but for status, checks and weights: compared with those
// cleared, by value.
func onlyHealthDiffers(a, b *consul.Catalog) bool {
	strip := func(c *consul.Catalog) []consul.Service {
		var out []consul.Service
		for _, s := range c.Services {
			s := *s
			s.Index, s.Instances = 0, slices.Clip(slices.Clone(s.Instances))
			if len(s.Instances) == 0 {
				s.Instances = nil // no instance is no instance, nil or not
			}
			for i := range s.Instances {
				in := &s.Instances[i]
				in.Status, in.Checks, in.WeightPassing, in.WeightWarning = "", nil, 0, 0
			}
			out = append(out, s)
		}
		return out
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

// structural adds or drops a service. The watcher would say so; half the
// time the Change claims endpoints anyway, and the path must see through
// it.
func structural(rng *rand.Rand, cat *consul.Catalog) change {
	services := slices.Clone(cat.Services)
	k := synthKeys[rng.IntN(len(synthKeys))]
	if i := slices.IndexFunc(services, func(s *consul.Service) bool { return s.Name == k.Name && s.Datacenter == k.Datacenter }); i >= 0 {
		services = slices.Delete(services, i, i+1)
	} else {
		services = append(services, &consul.Service{Name: k.Name, Datacenter: k.Datacenter, Instances: []consul.Instance{synthInstance(rng, k, 0)}})
	}
	c := consul.NewCatalog(services)
	c.Mesh = cat.Mesh
	out := change{what: "structure(" + k.String() + ")", cat: c}
	if rng.IntN(2) == 0 {
		out.change = consul.Change{Services: []consul.ServiceKey{k}, Endpoints: true}
	}
	return out
}

// worldCase is a policy and a first catalog; nil synth keeps cat.
type worldCase struct {
	name string
	pol  *policy.Policy
	cat  func(*rand.Rand) *consul.Catalog
}

// worldCases are the model's golden cases (their policies and catalogs)
// and the synthetic policy, with and without policy (mirror).
func worldCases(t testing.TB) []worldCase {
	t.Helper()
	synth := mustPolicy(t, synthPolicy)
	cases := []worldCase{
		{name: "synthetic", pol: synth, cat: synthCatalog},
		{name: "no-policy", cat: synthCatalog},
	}
	dirs, err := filepath.Glob("../model/testdata/*/catalog.json")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, p := range dirs {
		dir := filepath.Dir(p)
		cat, pol := goldenCase(t, dir)
		cases = append(cases, worldCase{name: filepath.Base(dir), pol: pol, cat: func(*rand.Rand) *consul.Catalog { return cat }})
	}
	return cases
}

// goldenCase reads a model golden case's catalog and policy, with the
// TLS files it names.
func goldenCase(t testing.TB, dir string) (*consul.Catalog, *policy.Policy) {
	t.Helper()
	cat, err := consul.ReadFixtureFile(filepath.Join(dir, "catalog.json"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(dir, "policy.hcl"))
	if err != nil {
		return cat, nil
	}
	cfg := policytest.Config(t, "policy.hcl", src)
	abs, _ := filepath.Abs(dir)
	for _, f := range cfg.Policy.Files() {
		if !filepath.IsAbs(f.Path) {
			f.Path = filepath.Join(abs, f.Path)
		}
	}
	for _, p := range cfg.Policy.Proxies {
		for _, l := range p.Listeners {
			for _, f := range l.JWKSFiles {
				if !filepath.IsAbs(f.Path) {
					f.Path = filepath.Join(abs, f.Path)
				}
			}
		}
	}
	if diags := cfg.Policy.ReadFiles(time.Now()); diags.HasErrors() {
		t.Fatal(diags)
	}
	return cat, cfg.Policy
}

// runSequence computes steps changes from the case's first catalog and
// checks every world against the whole pipeline's; it returns how many
// took the endpoint-only path.
func runSequence(t testing.TB, wc worldCase, rng *rand.Rand, steps int) int {
	t.Helper()
	memo := NewMemo()
	cat := wc.cat(rng)
	prev, err := Compute(Input{Catalog: cat, Policy: wc.pol}, memo)
	if err != nil {
		t.Fatalf("first world: %v", err)
	}
	incremental := 0
	for step := range steps {
		ch := mutate(rng, cat)
		// The last world stays as it was: the admin API and the console
		// may still read it while the next one is computed from it.
		before := cloneClusters(prev.Model.Clusters)
		whole, wantErr := Compute(Input{Catalog: ch.cat, Policy: wc.pol}, memo.Fork())
		got, err := Compute(Input{Catalog: ch.cat, Policy: wc.pol, Change: ch.change}, memo)
		where := fmt.Sprintf("step %d:%s", step, ch.what)
		if !reflect.DeepEqual(before, cloneClusters(prev.Model.Clusters)) {
			t.Fatalf("%s: computing the next world changed the last world's clusters", where)
		}
		if (err != nil) != (wantErr != nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("%s: error %v, whole pipeline %v", where, err, wantErr)
		}
		if err != nil {
			continue
		}
		sameWorld(t, where, prev, got, whole)
		// Only a health change without mesh data is within the rule, and
		// one within it must take the path, or the path is never used.
		if want := ch.healthy && ch.change.EndpointsOnly() && cat.Mesh == nil; got.Incremental != want {
			t.Fatalf("%s: incremental = %v, want %v", where, got.Incremental, want)
		}
		if got.Incremental {
			incremental++
			sharesUnchanged(t, where, prev.Model, got.Model)
		}
		cat, prev = ch.cat, got
	}
	return incremental
}

// cloneClusters copies the clusters, so a later change to one shows.
func cloneClusters(cs []*ir.Cluster) []ir.Cluster {
	out := make([]ir.Cluster, len(cs))
	for i, c := range cs {
		out[i] = *c
		out[i].Endpoints = slices.Clone(c.Endpoints)
	}
	return out
}

// sharesUnchanged fails unless the endpoint-only path's model holds the
// last model's very cluster wherever the cluster is unchanged: copying
// every cluster per flip was what a flip cost with thousands of services
// no proxy follows (issue 40).
func sharesUnchanged(t testing.TB, where string, prev, got *ir.Model) {
	t.Helper()
	for i, c := range got.Clusters {
		if p := prev.Clusters[i]; c != p && reflect.DeepEqual(*c, *p) {
			t.Fatalf("%s: unchanged cluster %q is a copy, not the last model's", where, c.Name)
		}
	}
}

// sameWorld fails unless got (the endpoint-only path's, if it took it)
// and whole (the whole pipeline's, on a fork of the same memo) are the
// same world: equal models, warnings and resources, and the same
// resource objects wherever whole reused one of prev's. EndpointsOnly
// and Incremental say how the world was asked for and computed, and are
// not compared.
func sameWorld(t testing.TB, where string, prev, got, whole *World) {
	t.Helper()
	if !reflect.DeepEqual(got.Model, whole.Model) {
		t.Fatalf("%s: model differs (-whole +got):\n%s", where, cmp.Diff(whole.Model, got.Model, cmp.Exporter(func(reflect.Type) bool { return true })))
	}
	if d := cmp.Diff(whole.Warnings, got.Warnings); d != "" {
		t.Fatalf("%s: warnings differ (-whole +got):\n%s", where, d)
	}
	if !sameOutput(got.Output, whole.Output) {
		errText := cmp.Comparer(func(a, b error) bool { return fmt.Sprint(a) == fmt.Sprint(b) })
		t.Fatalf("%s: output differs (-whole +got):\n%s", where, cmp.Diff(whole.Output, got.Output, protocmp.Transform(), errText))
	}
	sameObjects(t, where, prev.Output, got.Output, whole.Output)
}

// sameOutput is cmp.Diff(a, b, protocmp.Transform()) == "" (with errors
// compared by text), at a fraction of its cost: every resource by
// proto.Equal, everything else by value.
func sameOutput(a, b *xds.Output) bool {
	ra, rb := allResources(a), allResources(b)
	if len(ra) != len(rb) {
		return false
	}
	for i := range ra {
		if !proto.Equal(ra[i], rb[i]) {
			return false
		}
	}
	errs := func(m map[string]error) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = fmt.Sprint(v)
		}
		return out
	}
	sources := func(o *xds.Output) []map[string]string {
		var out []map[string]string
		for _, r := range []*xds.Resources{o.Shared, o.ProxylessReach, o.Unmatched, o.Proxyless} {
			if r != nil {
				out = append(out, r.RouteSources)
			}
		}
		for _, g := range slices.Sorted(maps.Keys(o.Groups)) {
			out = append(out, o.Groups[g].RouteSources)
		}
		return out
	}
	return reflect.DeepEqual(errs(a.Failed), errs(b.Failed)) && fmt.Sprint(a.ProxylessFailed) == fmt.Sprint(b.ProxylessFailed) &&
		a.UnmatchedNone == b.UnmatchedNone && a.MeshSecretsExternal == b.MeshSecretsExternal &&
		reflect.DeepEqual(a.ProxylessGroups, b.ProxylessGroups) &&
		slices.Equal(slices.Sorted(maps.Keys(a.Reach)), slices.Sorted(maps.Keys(b.Reach))) &&
		slices.Equal(slices.Sorted(maps.Keys(a.Groups)), slices.Sorted(maps.Keys(b.Groups))) &&
		(a.Proxyless == nil) == (b.Proxyless == nil) && reflect.DeepEqual(sources(a), sources(b))
}

// sameObjects fails unless every resource of got is whole's object where
// whole's is one prev served (the memo kept it), and a new one where
// whole's is new: so serving versions them alike.
func sameObjects(t testing.TB, where string, prev, got, whole *xds.Output) {
	t.Helper()
	old := map[any]bool{}
	for _, r := range allResources(prev) {
		old[r] = true
	}
	// A reach set whose objects are all the served ones is the served
	// set (reach.go), which serving finds unchanged by identity: the
	// endpoint-only path must leave the translator remembering its sets.
	for name, r := range whole.Reach {
		if p := prev.Reach[name]; p != nil && r != p && slices.Equal(r.Clusters, p.Clusters) &&
			slices.Equal(r.Endpoints, p.Endpoints) && slices.Equal(r.Secrets, p.Secrets) {
			t.Fatalf("%s: group %q: the whole pipeline rebuilt a reach set of served objects: the memo forgot it", where, name)
		}
	}
	g, w := allResources(got), allResources(whole)
	if len(g) != len(w) {
		t.Fatalf("%s: %d resources, whole %d", where, len(g), len(w))
	}
	for i := range w {
		if old[w[i]] && g[i] != w[i] {
			t.Fatalf("%s: resource %d (%s) is a new object where the whole pipeline reuses the served one", where, i, xds.ResourceName(w[i]))
		}
		if !old[w[i]] && old[g[i]] {
			t.Fatalf("%s: resource %d (%s) is the served object where the whole pipeline builds a new one", where, i, xds.ResourceName(w[i]))
		}
	}
}

// allResources lists every resource of o, shared and per role, in a
// stable order, with a nil between kinds and roles so that a resource
// moved to another cannot compare equal.
func allResources(o *xds.Output) []types.Resource {
	var out []types.Resource
	add := func(r *xds.Resources) {
		out = append(out, nil)
		if r == nil {
			return
		}
		byType := r.ByType()
		for _, typ := range slices.Sorted(maps.Keys(byType)) {
			out = append(append(out, byType[typ]...), nil)
		}
	}
	add(o.Shared)
	add(o.ProxylessReach)
	add(o.Unmatched)
	add(o.Proxyless)
	for _, g := range slices.Sorted(maps.Keys(o.Reach)) {
		add(o.Reach[g])
	}
	for _, g := range slices.Sorted(maps.Keys(o.Groups)) {
		add(o.Groups[g])
	}
	return out
}

// TestEndpointOnlyIsTheWholeWorld: for every case, random sequences of
// changes give on the endpoint-only path the world the whole pipeline
// gives, and the path is taken for every health change without mesh data.
func TestEndpointOnlyIsTheWholeWorld(t *testing.T) {
	total := 0
	for _, wc := range worldCases(t) {
		t.Run(wc.name, func(t *testing.T) {
			seeds := uint64(10)
			if wc.cat(rand.New(rand.NewPCG(0, 0))).Mesh != nil {
				seeds = 1 // always built whole, and slow to build
			}
			for seed := range seeds {
				total += runSequence(t, wc, rand.New(rand.NewPCG(seed, 40)), 40)
			}
		})
	}
	if total == 0 {
		t.Fatal("no change took the endpoint-only path")
	}
	t.Logf("%d changes took the endpoint-only path", total)
}

// FuzzEndpointOnly: the same property with fuzzed seeds, for any case.
func FuzzEndpointOnly(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(0))
	f.Add(uint64(7), uint64(40), uint8(1))
	f.Add(uint64(3), uint64(5), uint8(20))
	cases := worldCases(f)
	f.Fuzz(func(t *testing.T, a, b uint64, which uint8) {
		runSequence(t, cases[int(which)%len(cases)], rand.New(rand.NewPCG(a, b)), 12)
	})
}
