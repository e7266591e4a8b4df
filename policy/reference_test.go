package policy

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// schemaNames lists every block and attribute name the HCL schema accepts,
// as "path.name", by walking the gohcl struct tags.
func schemaNames(t reflect.Type, path string, seen map[reflect.Type]bool, out *[]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return
	}
	seen[t] = true
	defer delete(seen, t)
	for i := range t.NumField() {
		f := t.Field(i)
		name, kind, _ := strings.Cut(f.Tag.Get("hcl"), ",")
		switch kind {
		case "block":
			*out = append(*out, path+name)
			schemaNames(f.Type, path+name+".", seen, out)
		case "", "optional":
			if name != "" {
				*out = append(*out, path+name)
			}
		}
	}
}

// configurationPages are the docs pages that hold the configuration
// reference, moved out of the README (issue 43).
var configurationPages = []string{
	"../docs/reference/daemon-settings.md",
	"../docs/reference/policy.md",
	"../docs/reference/http-features.md",
	"../docs/reference/tls.md",
	"../docs/reference/tag-routes.md",
	"../docs/reference/config-entries.md",
	"../docs/reference/proxyless-grpc.md",
	"../docs/reference/mesh.md",
	"../docs/how-to/set-up-the-mesh.md",
	"../docs/how-to/transparent-proxy.md",
	"../docs/how-to/proxyless-grpc-in-the-mesh.md",
}

// TestDocsDocumentEverySchemaName keeps the configuration reference in
// docs/ in step with the schema: every block and attribute a user can
// write must appear there, in an HCL example line.
func TestDocsDocumentEverySchemaName(t *testing.T) {
	var all strings.Builder
	for _, f := range configurationPages {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
		all.WriteString("\n")
	}
	section := all.String()
	// route_test blocks are no part of the routing policy: they are
	// documented on their own page, with package routetest's own check
	// of their schema.
	routeTests, err := os.ReadFile("../docs/reference/route-tests.md")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	schemaNames(reflect.TypeOf(documentSchema{}), "", map[reflect.Type]bool{}, &names)
	if len(names) < 50 {
		t.Fatalf("schema walk found only %d names: %v", len(names), names)
	}
	elsewhere := map[string]bool{"route_test": true}
	var missing []string
	for _, full := range names {
		name := full[strings.LastIndex(full, ".")+1:]
		// As written in HCL: `name =`, `name {` or `name "label" {`.
		re := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\s*(=|\{|")`)
		in := section
		if elsewhere[full] {
			in = string(routeTests)
		}
		if !re.MatchString(in) {
			missing = append(missing, full)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("the configuration reference in docs/reference does not show these (add them to an HCL example):\n  %s", strings.Join(missing, "\n  "))
	}
}
