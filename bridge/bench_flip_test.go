package bridge_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// flipCatalogs are two catalogs of followed services of 20 instances
// (the first 10 routed by benchPolicy's group) and background services
// of 5 that no proxy follows, everything exported: they differ only in
// one instance of svc-0000 failing its check. Every other service is the
// same object in both, as the watcher republishes a service it did not
// re-read.
func flipCatalogs(followed, background int) [2]*consul.Catalog {
	mk := func(name string, first, n int) *consul.Service {
		s := &consul.Service{Name: name, Index: 1}
		for j := 0; j < n; j++ {
			k := first + j
			s.Instances = append(s.Instances, consul.Instance{
				ID: fmt.Sprintf("%s-%d", name, j), Node: fmt.Sprintf("node-%06d", k), Datacenter: "dc1",
				Address: fmt.Sprintf("10.%d.%d.%d", byte(k>>16), byte(k>>8), byte(k)), Port: 8000 + j,
				NodeMeta: map[string]string{"zone": "z1"}, Status: consul.StatusPassing, WeightPassing: 1, WeightWarning: 1,
			})
		}
		return s
	}
	var shared []*consul.Service
	n := 0
	for i := 1; i < followed; i++ {
		shared = append(shared, mk(fmt.Sprintf("svc-%04d", i), n, 20))
		n += 20
	}
	for i := 0; i < background; i++ {
		shared = append(shared, mk(fmt.Sprintf("bg-%05d", i), n, 5))
		n += 5
	}
	var out [2]*consul.Catalog
	for v := range out {
		s := mk("svc-0000", n, 20)
		if v == 1 {
			s.Instances[3].Status = consul.StatusCritical
		}
		out[v] = consul.NewCatalog(append([]*consul.Service{s}, shared...))
	}
	return out
}

// BenchmarkFlipUnfollowed: one instance's health flip, from catalog to
// snapshot set (pipeline.Compute + Server.Update), in a world of 10
// followed services with 0, 2,000 and 10,000 services no proxy follows.
// full passes no Change (the whole pipeline, as before issue 40);
// incremental passes the watcher's endpoint-only Change. Issue 40's
// target: incremental with +2,000 at most 1.5× incremental with +0
// (+10,000: 2×).
func BenchmarkFlipUnfollowed(b *testing.B) {
	pol := benchPolicy(b)
	resolve := pipeline.GroupOf(pol)
	for _, bg := range []int{0, 2000, 10000} {
		cats := flipCatalogs(10, bg)
		for _, path := range []string{"full", "incremental"} {
			b.Run(fmt.Sprintf("background=%d/%s", bg, path), func(b *testing.B) {
				s := serve.NewServer(serve.ServerConfig{Logger: zerolog.Nop()})
				memo := pipeline.NewMemo()
				ctx := context.Background()
				w, err := pipeline.Compute(pipeline.Input{Catalog: cats[0], Policy: pol}, memo)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Update(ctx, w.Output, resolve); err != nil {
					b.Fatal(err)
				}
				var change consul.Change
				if path == "incremental" {
					change = consul.Change{Services: []consul.ServiceKey{{Name: "svc-0000"}}, Endpoints: true}
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					w, err := pipeline.Compute(pipeline.Input{Catalog: cats[i%2], Policy: pol, Change: change}, memo)
					if err != nil {
						b.Fatal(err)
					}
					if w.Incremental != (path == "incremental") {
						b.Fatalf("incremental = %v on the %s path", w.Incremental, path)
					}
					if _, err := s.Update(ctx, w.Output, resolve); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
