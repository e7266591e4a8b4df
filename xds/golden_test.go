package xds_test

import (
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/golden"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// modelCases holds the cases of the previous stage, model.Build: their
// model.golden.json is what the goldens here translate.
const modelCases = "../model/testdata"

// goldenModels reads the model of every golden case, private keys given
// back from the case's TLS files (the golden files have them redacted).
func goldenModels(t *testing.T) map[string]*ir.Model {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(modelCases, "*", golden.ModelFile))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden cases in %s: %v", modelCases, err)
	}
	models := map[string]*ir.Model{}
	for _, p := range paths {
		m, err := golden.ReadModel(p)
		if err != nil {
			t.Fatal(err)
		}
		models[filepath.Base(filepath.Dir(p))] = m
	}
	return models
}

// goldenTypes names the golden file of each resource type.
var goldenTypes = map[string]string{
	resourcev3.ClusterType:  "cds",
	resourcev3.EndpointType: "eds",
	resourcev3.ListenerType: "lds",
	resourcev3.RouteType:    "rds",
}

// TestGolden translates the model of every case, the output of the
// previous stage (../model/testdata/<case>/model.golden.json, which
// model's golden test writes from the case's catalog and policy), and
// compares each resource type with testdata/<case>/<type>.golden.json, and
// what proxyless gRPC clients get (API listeners and their routes) with
// testdata/<case>/proxyless.golden.json.
func TestGolden(t *testing.T) {
	models := goldenModels(t)
	// Every case here is one of model's: goldens without a model would
	// never be checked again.
	goldens, err := filepath.Glob("testdata/*/*.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range goldens {
		// The mesh cases (mesh_golden_test.go) build their models by
		// hand; the proxyless mesh's have their own inputs (meshgrpc_test.go).
		if name := filepath.Base(filepath.Dir(p)); models[name] == nil && meshCases[name] == nil && !strings.HasPrefix(name, meshGRPCCasePrefix) {
			t.Errorf("%s: no model for case %q in %s", p, name, modelCases)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(models)) {
		t.Run(name, func(t *testing.T) { checkGoldenCase(t, filepath.Join("testdata", name), models[name]) })
	}
}

// checkGoldenCase translates m and compares what every kind of node gets
// with the golden files under dir, checking each group's snapshot is
// consistent on its own.
func checkGoldenCase(t *testing.T, dir string, m *ir.Model) {
	t.Helper()
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatalf("Translate: %v", err)
	}
	byType := out.Shared.ByType()
	snapshot := func(r *xds.Resources) *cachev3.Snapshot {
		snap := &cachev3.Snapshot{}
		for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType} {
			snap.Resources[cachev3.GetResponseType(typ)] = cachev3.NewResources("v", byType[typ])
		}
		for typ, items := range r.ByType() {
			if typ == resourcev3.ListenerType || typ == resourcev3.RouteType {
				snap.Resources[cachev3.GetResponseType(typ)] = cachev3.NewResources("v", items)
			}
		}
		secrets := append(slices.Clone(byType[resourcev3.SecretType]), r.ByType()[resourcev3.SecretType]...)
		snap.Resources[cachev3.GetResponseType(resourcev3.SecretType)] = cachev3.NewResources("v", secrets)
		return snap
	}
	var groupListeners, groupRoutes, groupSecrets []types.Resource
	for _, g := range slices.Sorted(maps.Keys(out.Groups)) {
		if out.ProxylessGroups[g] {
			// A proxyless group: checked with Proxyless below.
			continue
		}
		// Every group's snapshot must be consistent on its own,
		// SDS references included.
		if err := snapshot(out.Groups[g]).Consistent(); err != nil {
			t.Errorf("group %q snapshot not consistent: %v", g, err)
		}
		if err := xds.ConsistentExcept(out.Shared, out.Groups[g], out.ExternalSecrets()); err != nil {
			t.Errorf("group %q snapshot not consistent: %v", g, err)
		}
		groupTypes := out.Groups[g].ByType()
		groupListeners = append(groupListeners, groupTypes[resourcev3.ListenerType]...)
		groupRoutes = append(groupRoutes, groupTypes[resourcev3.RouteType]...)
		groupSecrets = append(groupSecrets, groupTypes[resourcev3.SecretType]...)
	}
	byType[resourcev3.ListenerType] = append(byType[resourcev3.ListenerType], groupListeners...)
	byType[resourcev3.RouteType] = append(byType[resourcev3.RouteType], groupRoutes...)
	byType[resourcev3.SecretType] = append(byType[resourcev3.SecretType], groupSecrets...)
	for typ, short := range goldenTypes {
		compareGolden(t, filepath.Join(dir, short+".golden.json"), marshalResources(t, byType[typ]))
	}
	// SDS secrets (shared, then each group's), for the cases that
	// have any.
	sdsPath := filepath.Join(dir, "sds.golden.json")
	if _, err := os.Stat(sdsPath); err == nil || len(byType[resourcev3.SecretType]) > 0 {
		compareGolden(t, sdsPath, marshalResources(t, byType[resourcev3.SecretType]))
	}
	// What proxyless gRPC clients get instead of a group's
	// listeners: API listeners, then their route configurations.
	if out.Proxyless == nil {
		t.Fatal("Translate left Proxyless nil")
	}
	if len(out.Failed) > 0 || out.ProxylessFailed != nil {
		t.Errorf("groups failed: %v, proxyless: %v", out.Failed, out.ProxylessFailed)
	}
	if err := xds.Consistent(out.Shared, out.Proxyless); err != nil {
		t.Errorf("proxyless snapshot not consistent: %v", err)
	}
	pl := out.Proxyless.ByType()
	compareGolden(t, filepath.Join(dir, "proxyless.golden.json"),
		marshalResources(t, append(pl[resourcev3.ListenerType], pl[resourcev3.RouteType]...)))
	compareGolden(t, filepath.Join(dir, "reach.golden.json"), reachJSON(t, out))
}

// reachJSON renders what each kind of node gets of the clusters,
// endpoints and upstream secrets, by name: each group, the proxyless
// clients ("(proxyless)") and nodes in no group ("(unmatched)").
func reachJSON(t *testing.T, out *xds.Output) []byte {
	t.Helper()
	type names struct{ Clusters, Endpoints, Secrets []string }
	of := func(r *xds.Resources) names {
		n := names{Clusters: []string{}, Endpoints: []string{}, Secrets: []string{}}
		for _, c := range r.Clusters {
			n.Clusters = append(n.Clusters, c.GetName())
		}
		for _, e := range r.Endpoints {
			n.Endpoints = append(n.Endpoints, e.GetClusterName())
		}
		for _, s := range r.Secrets {
			n.Secrets = append(n.Secrets, s.GetName())
		}
		return n
	}
	all := map[string]names{"(proxyless)": of(out.ProxylessReach), "(unmatched)": of(out.Unmatched)}
	for g, r := range out.Reach {
		all[g] = of(r)
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// marshalResources renders resources as indented JSON. protojson output is
// deliberately unstable in whitespace, so it is re-encoded with
// encoding/json to get bytes that only change when content does.
func marshalResources(t *testing.T, items []types.Resource) []byte {
	t.Helper()
	list := make([]json.RawMessage, 0, len(items))
	for _, r := range items {
		b, err := protojson.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, b)
	}
	var v any
	raw, _ := json.Marshal(list)
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	golden.Compare(t, path, got, *update)
}
