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

// TestREADMEDocumentsEverySchemaName keeps the README's configuration
// reference in step with the schema: every block and attribute a user can
// write must appear there, in an HCL example line.
func TestREADMEDocumentsEverySchemaName(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(readme), "## Configuration")
	end := strings.Index(string(readme), "## Operations")
	if start < 0 || end < start {
		t.Fatal("README lacks the Configuration and Operations sections")
	}
	section := string(readme[start:end])
	var names []string
	schemaNames(reflect.TypeOf(documentSchema{}), "", map[reflect.Type]bool{}, &names)
	if len(names) < 50 {
		t.Fatalf("schema walk found only %d names: %v", len(names), names)
	}
	// route_test blocks are no part of the routing policy: they are
	// documented under Operations ("Route tests"), with package
	// routetest's own check of their schema.
	elsewhere := map[string]bool{"route_test": true}
	var missing []string
	for _, full := range names {
		name := full[strings.LastIndex(full, ".")+1:]
		// As written in HCL: `name =`, `name {` or `name "label" {`.
		re := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\s*(=|\{|")`)
		in := section
		if elsewhere[full] {
			in = string(readme[end:])
		}
		if !re.MatchString(in) {
			missing = append(missing, full)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("README's configuration reference does not show these (add them to an HCL example):\n  %s", strings.Join(missing, "\n  "))
	}
}
