package xds_test

import (
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/envoycompat"
)

// envoy122Dir holds what every golden case serves an Envoy 1.22, which
// the module internal/envoyapi122 decodes with Envoy 1.22's own API
// (its TestOldestEnvoyKnowsEverything). It cannot import this module
// (another go-control-plane), so the bytes are the interface.
const envoy122Dir = "../internal/envoyapi122/testdata/served"

// noRewrite writes the fixtures as translated, not rewritten: what
// TestOldestEnvoyKnowsEverything finds without envoycompat (run with
// -update, then that test, then -update again without it).
var noRewrite = flag.Bool("envoy122-norewrite", false, "with -update, write the Envoy 1.22 fixtures without envoycompat's rewrites")

// TestEnvoy122Fixtures checks (or, with -update, writes) what every
// golden and mesh case serves Envoy proxies claiming Envoy 1.22: every
// group's listeners, routes and secrets (private keys redacted) and the
// clusters and endpoints, rewritten by envoycompat for that version as
// package serve serves them.
func TestEnvoy122Fixtures(t *testing.T) {
	models := goldenModels(t)
	for name, build := range meshCases {
		models[name] = build(t)
	}
	want := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(models)) {
		file := filepath.Join(envoy122Dir, name+".pb")
		want[file] = true
		got := servedToEnvoy122(t, models[name])
		if *update {
			if err := os.MkdirAll(envoy122Dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		// Compared decoded: the translator's typed configs are not
		// encoded deterministically (maps), so equal bytes are too much.
		have, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		a, b := &discoveryv3.DeltaDiscoveryResponse{}, &discoveryv3.DeltaDiscoveryResponse{}
		if err := proto.Unmarshal(have, a); err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(got, b); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(a, b, protocmp.Transform()); d != "" {
			t.Errorf("%s is not what case %s serves Envoy 1.22; rerun: go test ./xds -run TestEnvoy122Fixtures -update (-want +got):\n%s", file, name, d)
		}
	}
	files, _ := filepath.Glob(filepath.Join(envoy122Dir, "*.pb"))
	for _, f := range files {
		if !want[f] && !*update {
			t.Errorf("%s: no such case any more; remove it", f)
		}
	}
}

// servedToEnvoy122 encodes, as one DeltaDiscoveryResponse, everything m
// serves Envoy proxies, rewritten for Envoy 1.22.
func servedToEnvoy122(t *testing.T, m *ir.Model) []byte {
	t.Helper()
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatalf("Translate: %v", err)
	}
	byType := out.Shared.ByType()
	for _, g := range slices.Sorted(maps.Keys(out.Groups)) {
		if out.ProxylessGroups[g] {
			continue // gRPC clients: no Envoy version
		}
		for typ, items := range out.Groups[g].ByType() {
			if typ != resourcev3.ClusterType && typ != resourcev3.EndpointType {
				byType[typ] = append(byType[typ], items...)
			}
		}
	}
	class := envoycompat.ClassOf(envoycompat.Oldest)
	resp := &discoveryv3.DeltaDiscoveryResponse{}
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType, resourcev3.SecretType} {
		items := byType[typ]
		if !*noRewrite {
			items, _ = envoycompat.Rewrite(class, items)
		}
		for _, r := range items {
			a := &anypb.Any{}
			if err := anypb.MarshalFrom(a, xds.Redact(r), proto.MarshalOptions{Deterministic: true}); err != nil {
				t.Fatal(err)
			}
			resp.Resources = append(resp.Resources, &discoveryv3.Resource{Name: xds.ResourceName(r.(types.Resource)), Resource: a})
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
