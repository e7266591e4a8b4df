package envoycompat_test

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/golden"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/envoycompat"
)

// served translates a golden case: everything its Envoy groups serve,
// by type.
func served(t *testing.T, name string) map[string][]types.Resource {
	t.Helper()
	m, err := golden.ReadModel(filepath.Join("../../model/testdata", name, golden.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	all := out.Shared.ByType() // every cluster and endpoint
	for _, g := range slices.Sorted(maps.Keys(out.Groups)) {
		for _, typ := range []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.SecretType} {
			all[typ] = append(all[typ], out.Groups[g].ByType()[typ]...)
		}
	}
	return all
}

// asJSON renders resources with their typed configs expanded.
func asJSON(t *testing.T, items []types.Resource) string {
	t.Helper()
	var b strings.Builder
	for _, r := range items {
		j, err := protojson.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return strings.ReplaceAll(b.String(), " ", "")
}

// TestRewrite: each feature, for an Envoy just below the release that
// brought it and one at it: the older form or nothing below, the
// translation as it is from it on, and a note whenever something changed.
func TestRewrite(t *testing.T) {
	const (
		corsPolicyType = `"@type":"type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy"`
		perRouteOff    = `"@type":"type.googleapis.com/envoy.extensions.filters.http.compressor.v3.CompressorPerRoute"`
	)
	for name, tc := range map[string]struct {
		golden          string
		below, at       envoycompat.Version
		translated      []string // in the translation (and at the release)
		older, notOlder []string // below it: present, absent
	}{
		"cors per route": {"http_cors", v(1, 25), v(1, 26), []string{corsPolicyType},
			[]string{`"cors":{"allowOriginStringMatch"`}, []string{corsPolicyType}},
		"compression off per route": {"http_compression", v(1, 25), v(1, 26), []string{perRouteOff}, nil, []string{perRouteOff}},
		"choose_first":              {"http_compression", v(1, 25), v(1, 26), []string{`"chooseFirst":true`}, []string{"envoy.compression.gzip.compressor"}, []string{`"chooseFirst"`}},
		"zstd":                      {"http_compression", v(1, 22), v(1, 23), []string{"zstd.compressor"}, []string{"envoy.compression.gzip.compressor"}, []string{"zstd"}},
		"otel tracer":               {"http_tracing", v(1, 22), v(1, 23), []string{"OpenTelemetryConfig"}, nil, []string{"OpenTelemetryConfig", `"tracing"`}},
		"otel access log":           {"http_access_logs", v(1, 36), v(1, 37), []string{`"logName":"edge.http"`}, []string{`"commonConfig":{"logName":"edge.http","grpcService"`, `"transportApiVersion":"V3"`}, []string{`"logName":"edge.http","statPrefix"`}},
		"otel access log stat":      {"http_access_logs", v(1, 30), v(1, 31), []string{`"statPrefix":"access_log."`}, []string{`"commonConfig"`}, []string{`"statPrefix":"access_log."`}},
		"jwt claim_to_headers":      {"http_jwt", v(1, 25), v(1, 26), []string{`"claimToHeaders"`}, []string{`"providers"`}, []string{`"claimToHeaders"`}},
		"ext_authz allowed_headers": {"http_ext_authz", v(1, 25), v(1, 26), []string{`"allowedHeaders"`}, []string{"ExtAuthz"}, []string{`"allowedHeaders"`}},
		"load_balancing_policy":     {"lb_policies", v(1, 22), v(1, 23), []string{`"loadBalancingPolicy"`}, []string{`"lbPolicy":"LEAST_REQUEST"`}, []string{`"loadBalancingPolicy"`}},
		"per-client rate limit":     {"http_local_ratelimit", v(1, 34), v(1, 35), []string{`{"key":"remote_address"}`}, []string{`"value":"partner"`}, []string{`{"key":"remote_address"}`}},
		"rate limit descriptors":    {"http_local_ratelimit", v(1, 32), v(1, 33), []string{`"value":"partner"`}, []string{`"tokenBucket"`}, []string{`"value":"partner"`, `"descriptors"`}},
	} {
		t.Run(name, func(t *testing.T) {
			byType := served(t, tc.golden)
			all := func(ver envoycompat.Version) (string, []string) {
				var items []types.Resource
				var notes []string
				for _, typ := range slices.Sorted(maps.Keys(byType)) {
					got, n := envoycompat.Rewrite(envoycompat.ClassOf(ver), byType[typ])
					items, notes = append(items, got...), append(notes, n...)
				}
				return asJSON(t, items), notes
			}
			translated := asJSON(t, slices.Concat(slices.Collect(maps.Values(byType))...))
			at, atNotes := all(tc.at)
			below, belowNotes := all(tc.below)
			for _, s := range tc.translated {
				if !strings.Contains(translated, s) {
					t.Fatalf("the translation of %s has no %s: the case does not use the feature", tc.golden, s)
				}
				if !strings.Contains(at, s) {
					t.Errorf("Envoy %v lost %s, which it has", tc.at, s)
				}
			}
			for _, s := range tc.older {
				if !strings.Contains(below, s) {
					t.Errorf("Envoy %v is not served %s", tc.below, s)
				}
			}
			for _, s := range tc.notOlder {
				if strings.Contains(below, s) {
					t.Errorf("Envoy %v is served %s, which it does not have", tc.below, s)
				}
			}
			if len(belowNotes) == 0 || slices.Equal(belowNotes, atNotes) {
				t.Errorf("notes below %v = %q, at it %q: the change is not noted", tc.at, belowNotes, atNotes)
			}
		})
	}
}

func v(major, minor uint32) envoycompat.Version {
	return envoycompat.Version{Major: major, Minor: minor}
}

// TestRewriteCopies: the translation is never modified, the current
// class gets it as it is (no copy), and an older class shares every
// resource it does not rewrite.
func TestRewriteCopies(t *testing.T) {
	for _, name := range []string{"http_cors", "http_compression", "http_access_logs", "http_local_ratelimit", "lb_policies", "http_jwt"} {
		byType := served(t, name)
		for typ, items := range byType {
			before := make([]proto.Message, len(items))
			for i, r := range items {
				before[i] = proto.Clone(r)
			}
			cur, notes := envoycompat.Rewrite(envoycompat.ClassOf(envoycompat.Newest), items)
			if len(items) > 0 && &cur[0] != &items[0] || notes != nil {
				t.Errorf("%s %s: the newest Envoy gets a copy (notes %q)", name, typ, notes)
			}
			old, _ := envoycompat.Rewrite(envoycompat.ClassOf(envoycompat.Oldest), items)
			if len(old) != len(items) {
				t.Fatalf("%s %s: %d resources rewritten into %d", name, typ, len(items), len(old))
			}
			for i, r := range items {
				if !proto.Equal(r, before[i]) {
					t.Errorf("%s %s %s: the translation was modified", name, typ, xds.ResourceName(r))
				}
				if old[i] != r && proto.Equal(old[i], r) {
					t.Errorf("%s %s %s: copied without a change", name, typ, xds.ResourceName(r))
				}
			}
		}
	}
}

// TestMemoKeepsCopies: a resource the next translation keeps (the same
// object) keeps its rewritten copy, so the serving cache need not encode
// it again; copies no translation used for two rounds are forgotten.
func TestMemoKeepsCopies(t *testing.T) {
	clusters := served(t, "lb_policies")[resourcev3.ClusterType]
	old := envoycompat.ClassOf(envoycompat.Oldest)
	var m envoycompat.Memo
	first, notes := m.Rewrite(old, clusters)
	m.Next()
	again, notes2 := m.Rewrite(old, clusters)
	rewritten := 0
	for i := range first {
		if first[i] != clusters[i] {
			rewritten++
		}
		if again[i] != first[i] {
			t.Errorf("cluster %s: a new copy for the same translated object", xds.ResourceName(clusters[i]))
		}
	}
	if rewritten == 0 || len(notes) == 0 || !slices.Equal(notes, notes2) {
		t.Fatalf("%d clusters rewritten, notes %q then %q: the case must need a rewrite, noted alike", rewritten, notes, notes2)
	}
	m.Next()
	m.Next() // two translations that did not use them
	third, _ := m.Rewrite(old, clusters)
	for i := range third {
		if third[i] != clusters[i] && third[i] == first[i] {
			t.Errorf("cluster %s: a copy outlived two translations without it", xds.ResourceName(clusters[i]))
		}
	}
}
