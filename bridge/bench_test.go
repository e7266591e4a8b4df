package bridge_test

// Micro-benchmarks of the build pipeline at fleet scale (go test -bench .
// -benchmem ./bridge): 1000 services × 20 instances, export_all_services,
// one proxy group routing to 10 of them.

import (
	"context"
	"fmt"
	"testing"

	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/policytest"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

const benchServices, benchInstances = 1000, 20

// benchCatalog builds the catalog; instance flip%benchInstances of the
// first service is critical (flip < 0: none), to model one-instance changes.
func benchCatalog(flip int) *consul.Catalog {
	services := make([]*consul.Service, benchServices)
	for i := range services {
		s := &consul.Service{Name: fmt.Sprintf("svc-%04d", i), Index: uint64(i + 1)}
		for j := 0; j < benchInstances; j++ {
			n := i*benchInstances + j
			st := consul.StatusPassing
			if i == 0 && flip >= 0 && j == flip%benchInstances {
				st = consul.StatusCritical
			}
			s.Instances = append(s.Instances, consul.Instance{
				ID: fmt.Sprintf("%s-%d", s.Name, j), Node: fmt.Sprintf("node-%05d", n), Datacenter: "dc1",
				Address: fmt.Sprintf("10.%d.%d.%d", byte(n>>16), byte(n>>8), byte(n)), Port: 8000 + j,
				NodeMeta: map[string]string{"zone": "z1"}, Status: st, WeightPassing: 1, WeightWarning: 1,
			})
		}
		services[i] = s
	}
	return consul.NewCatalog(services)
}

func benchPolicy(b *testing.B) *policy.Policy {
	src := "export_all_services = true\nproxy \"bench\" {\n  listener \"http\" {\n    port = 8080\n    virtual_host \"all\" {\n"
	for i := 0; i < 10; i++ {
		src += fmt.Sprintf("      route {\n        match {\n          path_prefix = \"/svc-%04d/\"\n        }\n        service = \"svc-%04d\"\n      }\n", i, i)
	}
	src += "    }\n  }\n}\n"
	return policytest.Config(b, "bench.hcl", []byte(src)).Policy
}

// BenchmarkBuild: catalog + policy → ir.Model for the whole world.
func BenchmarkBuild(b *testing.B) {
	cat, pol := benchCatalog(-1), benchPolicy(b)
	b.ReportAllocs()
	for b.Loop() {
		model.Build(cat, pol)
	}
}

// BenchmarkBuildTranslate: the full build the daemon does on every
// debounced change (Build + Translate, including ValidateAll).
func BenchmarkBuildTranslate(b *testing.B) {
	cat, pol := benchCatalog(-1), benchPolicy(b)
	b.ReportAllocs()
	for b.Loop() {
		m, _ := model.Build(cat, pol)
		if _, err := xds.Translate(m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOneInstanceChange: everything the daemon does between a
// catalog update with one changed instance and the snapshot being set
// (Build, Translate, Server.Update), with one snapshot key. Pushing to
// proxies comes on top and scales with N (see bench/README.md).
// translate is the pure Translate (every resource rebuilt, validated and
// marshalled again); translator is the daemon's memoising Translator;
// pipeline is what the daemon runs: pipeline.Compute with its memo.
func BenchmarkOneInstanceChange(b *testing.B) {
	cats := []*consul.Catalog{benchCatalog(0), benchCatalog(1)}
	pol := benchPolicy(b)
	resolve := func(nc string) string {
		if p := pol.ProxyFor(nc); p != nil {
			return p.Name
		}
		return ""
	}
	for _, mode := range []string{"translate", "translator", "pipeline"} {
		b.Run(mode, func(b *testing.B) {
			s := serve.NewServer(serve.ServerConfig{Logger: zerolog.Nop()})
			translate := xds.Translate
			if mode == "translator" {
				translate = xds.NewTranslator().Translate
			}
			memo := pipeline.NewMemo()
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				var out *xds.Output
				if mode == "pipeline" {
					w, err := pipeline.Compute(pipeline.Input{Catalog: cats[i%2], Policy: pol}, memo)
					if err != nil {
						b.Fatal(err)
					}
					out = w.Output
				} else {
					m, _ := model.Build(cats[i%2], pol)
					o, err := translate(m)
					if err != nil {
						b.Fatal(err)
					}
					out = o
				}
				if _, err := s.Update(ctx, out, resolve); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
