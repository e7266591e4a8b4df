package xds_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/hcl/v2"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// goldenTypes names the golden file of each resource type.
var goldenTypes = map[string]string{
	resourcev3.ClusterType:  "cds",
	resourcev3.EndpointType: "eds",
	resourcev3.ListenerType: "lds",
	resourcev3.RouteType:    "rds",
}

// TestGolden runs every case in testdata/<case>/ (catalog.json in Consul's
// own API shape, and policy.hcl if present) through model.Build and Translate and compares each
// resource type with testdata/<case>/<type>.golden.json, and what proxyless
// gRPC clients get (API listeners and their routes) with
// testdata/<case>/proxyless.golden.json.
func TestGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/*/catalog.json")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden cases found: %v", err)
	}
	for _, catPath := range dirs {
		dir := filepath.Dir(catPath)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			f, err := os.Open(catPath)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cat, err := consul.ReadFixture(f)
			if err != nil {
				t.Fatal(err)
			}
			var pol *policy.Policy
			if src, err := os.ReadFile(filepath.Join(dir, "policy.hcl")); err == nil {
				doc, diags := policy.Parse("policy.hcl", src)
				if diags.HasErrors() {
					t.Fatalf("policy: %v", diags)
				}
				cfg, diags := policy.Merge(doc)
				if diags.HasErrors() {
					t.Fatalf("policy: %v", diags)
				}
				pol = cfg.Policy
				// TLS files are named relative to policy.hcl, which the
				// case directory holds; paths never reach the goldens.
				diags = readFilesIn(t, dir, pol)
				if diags.HasErrors() {
					t.Fatalf("policy files: %v", diags)
				}
			}
			m, warnings := model.Build(cat, pol)
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
				if out.Groups[g] == out.Proxyless {
					// A proxyless group: checked with Proxyless below.
					continue
				}
				// Every group's snapshot must be consistent on its own,
				// SDS references included.
				if err := snapshot(out.Groups[g]).Consistent(); err != nil {
					t.Errorf("group %q snapshot not consistent: %v", g, err)
				}
				if err := xds.Consistent(snapshot(out.Groups[g])); err != nil {
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
			if err := xds.Consistent(snapshot(out.Proxyless)); err != nil {
				t.Errorf("proxyless snapshot not consistent: %v", err)
			}
			pl := out.Proxyless.ByType()
			compareGolden(t, filepath.Join(dir, "proxyless.golden.json"),
				marshalResources(t, append(pl[resourcev3.ListenerType], pl[resourcev3.RouteType]...)))
			compareGolden(t, filepath.Join(dir, "warnings.golden.txt"), []byte(strings.Join(warnings, "\n")+"\n"))
		})
	}
}

// readFilesIn reads the policy's TLS files from dir, where the case's
// policy.hcl (parsed under that bare name, so that goldens do not depend
// on where the repository is) names them relative to itself.
func readFilesIn(t *testing.T, dir string, pol *policy.Policy) hcl.Diagnostics {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range pol.Files() {
		if !filepath.IsAbs(f.Path) {
			f.Path = filepath.Join(abs, f.Path)
		}
	}
	return pol.ReadFiles(time.Now())
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
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./xds -run TestGolden -update to create it)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs (-want +got); if the change is intended, rerun with -update:\n%s", path, cmp.Diff(string(want), string(got)))
	}
}
