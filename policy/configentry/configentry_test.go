package configentry_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/golden"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/configentry"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// readEntries reads a JSON list of entries as `consul config read` prints
// them.
func readEntries(t *testing.T, path string) configentry.Entries {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(b, &raws); err != nil {
		t.Fatal(err)
	}
	var e configentry.Entries
	for _, r := range raws {
		entry, err := api.DecodeConfigEntryFromJSON(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Add(entry); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// TestToHCL: a Consul's entries become policy documents (golden), which
// the policy accepts and translates against a catalog, with every
// dropped or approximated setting in a note (golden).
func TestToHCL(t *testing.T) {
	dir := filepath.Join("testdata", "shop")
	docs, notes := configentry.ToHCL(readEntries(t, filepath.Join(dir, "entries.json")))
	var all bytes.Buffer
	var parsed []*policy.Document
	for _, d := range docs {
		all.WriteString("# " + d.Name + "\n")
		all.Write(d.Source)
		all.WriteString("\n")
		doc, diags := policy.ParseKV(d.Name, d.Source)
		if diags.HasErrors() {
			t.Fatalf("%s does not parse: %v\n%s", d.Name, diags, d.Source)
		}
		parsed = append(parsed, doc)
	}
	golden.Compare(t, filepath.Join(dir, "policy.golden.hcl"), all.Bytes(), *update)
	var nb strings.Builder
	for _, n := range notes {
		nb.WriteString(n.String() + "\n")
	}
	golden.Compare(t, filepath.Join(dir, "notes.golden.txt"), []byte(nb.String()), *update)

	cfg, diags := policy.Merge(parsed...)
	if diags.HasErrors() {
		t.Fatalf("the translated policy is rejected:\n%s", strings.Join(policy.FormatDiagnostics(diags), "\n"))
	}
	inst := func(id string, port int, tags []string, meta map[string]string) consul.Instance {
		return consul.Instance{ID: id, Node: "n1", Address: "10.0.0.1", Port: port, Tags: tags, Meta: meta, Status: consul.StatusPassing}
	}
	cat := consul.NewCatalog([]*consul.Service{
		{Name: "api", Instances: []consul.Instance{inst("api-1", 8001, nil, map[string]string{"version": "v1"}), inst("api-2", 8002, []string{"v2"}, map[string]string{"track": "canary"})}},
		{Name: "billing", Instances: []consul.Instance{inst("b-1", 9001, nil, nil)}},
		{Name: "echo", Instances: []consul.Instance{inst("e-1", 7001, []string{"canary"}, nil)}},
		{Name: "db", Instances: []consul.Instance{inst("db-1", 5432, nil, nil)}},
	})
	if diags := pipeline.Check(pipeline.Input{Catalog: cat, Policy: cfg.Policy}); diags.HasErrors() {
		t.Fatalf("the translated policy does not translate:\n%s", strings.Join(policy.FormatDiagnostics(diags), "\n"))
	}
}

// TestConflictsNameTheEntry: a service both an entry and an HCL file
// define is an error naming both places, the entry by kind and name.
func TestConflictsNameTheEntry(t *testing.T) {
	var e configentry.Entries
	_ = e.Add(&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", ConnectTimeout: 3e9})
	docs, _ := configentry.ToHCL(e)
	kv, diags := policy.ParseKV(docs[0].Name, docs[0].Source)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	file, _ := policy.Parse("policy.hcl", []byte("service \"api\" {}\n"))
	_, diags = policy.Merge(file, kv)
	got := strings.Join(policy.FormatDiagnostics(diags), "\n")
	if !strings.Contains(got, "consul-config:service-resolver/api:1:1: Duplicate service block") || !strings.Contains(got, "policy.hcl:1:1") {
		t.Fatalf("diagnostics %q, want the duplicate at the entry naming policy.hcl", got)
	}
}

// FuzzToHCL: whatever the strings in entries (names, filters, paths,
// headers), the documents made from them parse as HCL: values are written
// by hclwrite, never pasted into source text.
func FuzzToHCL(f *testing.F) {
	f.Add("api", "Service.Meta.v == x", "/p", "x-h", "v")
	f.Add("a\"b${x}%{if}", "\"t\" in Service.Tags", "/${x}", "h\n", "\\")
	f.Fuzz(func(t *testing.T, name, filter, path, header, value string) {
		var e configentry.Entries
		_ = e.Add(&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: name, Subsets: map[string]api.ServiceResolverSubset{name: {Filter: filter}}})
		_ = e.Add(&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: name, Routes: []api.ServiceRoute{{
			Match:       &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{PathPrefix: path, Header: []api.ServiceRouteHTTPMatchHeader{{Name: header, Exact: value}}}},
			Destination: &api.ServiceRouteDestination{PrefixRewrite: value, RequestHeaders: &api.HTTPHeaderModifiers{Set: map[string]string{header: value}}},
		}}})
		_ = e.Add(&api.IngressGatewayConfigEntry{Kind: api.IngressGateway, Name: name, Listeners: []api.IngressListener{{Port: 80, Protocol: "http", Services: []api.IngressService{{Name: name, Hosts: []string{value}}}}}})
		docs, _ := configentry.ToHCL(e)
		for _, d := range docs {
			if _, diags := hclsyntax.ParseConfig(d.Source, d.Name, hcl.InitialPos); diags.HasErrors() {
				t.Fatalf("%s does not parse: %v\n%s", d.Name, diags, d.Source)
			}
		}
	})
}

// TestToHCLMesh: with the mesh, a router and splitter of an HTTP (or
// gRPC) service also become its mesh_routes, with their subsets (each a
// mesh cluster, as in Consul's chain), in the same document as its
// grpc_service; the policy accepts them next to a mesh block. Without the
// mesh there are none.
func TestToHCLMesh(t *testing.T) {
	e := readEntries(t, filepath.Join("testdata", "shop", "entries.json"))
	plain, _ := configentry.ToHCL(e)
	e.Mesh = true
	docs, notes := configentry.ToHCL(e)
	meshDoc := func(docs []configentry.Document, svc string) string {
		for _, d := range docs {
			if strings.Contains(string(d.Source), `mesh_routes "`+svc+`"`) {
				return string(d.Source)
			}
		}
		return ""
	}
	for _, svc := range []string{"api", "echo"} {
		if meshDoc(plain, svc) != "" {
			t.Errorf("mesh_routes %q without the mesh", svc)
		}
		if meshDoc(docs, svc) == "" {
			t.Fatalf("no mesh_routes %q with the mesh", svc)
		}
	}
	// api's splitter (90 % v1, 10 % v2) is a split over two subsets: the
	// canary stays a canary between sidecars.
	src := meshDoc(docs, "api")
	mr := src[strings.Index(src, `mesh_routes "api"`):]
	canary := "split {\n      service = \"api\"\n      subset  = \"v1\"\n      weight  = 90\n    }\n    split {\n      service = \"api\"\n      subset  = \"v2\"\n      weight  = 10\n    }"
	if !strings.Contains(mr, canary) {
		t.Errorf("mesh_routes \"api\" lacks the 90/10 split over subsets v1 and v2:\n%s", mr)
	}
	// echo (grpc) keeps one document, named after its entries, holding
	// both blocks; api (http) gets one of its own.
	if src := meshDoc(docs, "echo"); !strings.Contains(src, `grpc_service "echo"`) {
		t.Errorf("echo's mesh_routes is not in its grpc_service document:\n%s", src)
	}
	// api (http) has its chain block with or without the mesh; the mesh
	// adds its mesh_routes to the same document.
	if len(docs) != len(plain) {
		t.Errorf("%d documents with the mesh, %d without; want as many", len(docs), len(plain))
	}
	seen := map[configentry.Note]bool{}
	for _, n := range notes {
		if seen[n] {
			t.Errorf("note given twice: %s", n)
		}
		seen[n] = true
		// The leaf's note for a subset it cannot serve (routes.go); only
		// "odd" (a port filter) is untranslatable here.
		if strings.Contains(n.Text, "is not translated, so the chain's traffic") && !strings.Contains(n.Text, `"odd"`) {
			t.Errorf("a translatable subset is dropped in the mesh: %s", n)
		}
	}
	parsed := []*policy.Document{}
	for _, d := range docs {
		doc, diags := policy.ParseKV(d.Name, d.Source)
		if diags.HasErrors() {
			t.Fatalf("%s does not parse: %v\n%s", d.Name, diags, d.Source)
		}
		parsed = append(parsed, doc)
	}
	meshBlock, diags := policy.Parse("mesh", []byte("mesh {}\n"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	cfg, diags := policy.Merge(append(parsed, meshBlock)...)
	if diags.HasErrors() {
		t.Fatalf("the translated policy is rejected:\n%s", strings.Join(policy.FormatDiagnostics(diags), "\n"))
	}
	if got := cfg.Policy.MeshRouteTargets(); len(got) == 0 {
		t.Errorf("no mesh route targets in the merged policy")
	}
}
