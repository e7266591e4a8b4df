package routetest

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestDocsDocumentEveryName keeps the route tests reference
// (docs/reference/route-tests.md) in step with the schema: every
// attribute and block of a route_test must appear there, as written in
// HCL or in the expectations table.
func TestDocsDocumentEveryName(t *testing.T) {
	page, err := os.ReadFile("../docs/reference/route-tests.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(page)
	var names []string
	for _, typ := range []reflect.Type{reflect.TypeOf(testSchema{}), reflect.TypeOf(requestSchema{}), reflect.TypeOf(expectSchema{})} {
		for i := range typ.NumField() {
			name, kind, _ := strings.Cut(typ.Field(i).Tag.Get("hcl"), ",")
			if name != "" && (kind == "" || kind == "optional" || kind == "block") {
				names = append(names, name)
			}
		}
	}
	if len(names) < 20 {
		t.Fatalf("schema walk found only %d names: %v", len(names), names)
	}
	if !regexp.MustCompile(`(?m)^route_test "`).MatchString(section) {
		t.Error(`the section shows no route_test "NAME" block`)
	}
	for _, name := range names {
		hcl := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\s*(=|\{)`)
		table := regexp.MustCompile("(?m)^\\| .*`" + regexp.QuoteMeta(name) + "`")
		if !hcl.MatchString(section) && !table.MatchString(section) {
			t.Errorf("docs/reference/route-tests.md does not show %q", name)
		}
	}
}
