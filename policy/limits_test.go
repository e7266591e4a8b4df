package policy

import (
	"fmt"
	"strings"
	"testing"
)

func TestLimits(t *testing.T) {
	t.Run("document size", func(t *testing.T) {
		src := []byte("# " + strings.Repeat("x", MaxDocumentBytes) + "\n")
		_, diags := Parse("big.hcl", src)
		if !diags.HasErrors() || diags[0].Summary != "Document too large" || diags[0].Subject.Filename != "big.hcl" {
			t.Fatalf("diags = %v", diags)
		}
	})
	t.Run("listeners per group", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("proxy \"edge\" {\n")
		for i := range MaxListenersPerGroup + 1 {
			fmt.Fprintf(&b, "  listener \"l%d\" {\n    port = %d\n    protocol = \"tcp\"\n    service = \"db\"\n  }\n", i, 10000+i)
		}
		b.WriteString("}\n")
		doc, diags := Parse("many.hcl", []byte(b.String()))
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		_, diags = Merge(doc)
		if !diags.HasErrors() || diags[0].Summary != "Too many listeners" {
			t.Fatalf("diags = %v", diags)
		}
		// The diagnostic points at the first listener past the limit.
		if want := 2 + 5*MaxListenersPerGroup; diags[0].Subject.Start.Line != want {
			t.Fatalf("points at line %d, want %d", diags[0].Subject.Start.Line, want)
		}
	})
	t.Run("routes per listener", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("proxy \"edge\" {\n  listener \"http\" {\n    port = 8080\n    virtual_host \"all\" {\n")
		for i := range MaxRoutesPerListener + 1 {
			fmt.Fprintf(&b, "      route {\n        match {\n          path = \"/p%d\"\n        }\n        service = \"web\"\n      }\n", i)
		}
		b.WriteString("    }\n  }\n}\n")
		doc, diags := Parse("routes.hcl", []byte(b.String()))
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		_, diags = Merge(doc)
		if !diags.HasErrors() || diags[0].Summary != "Too many routes" {
			t.Fatalf("diags = %v", diags[:min(3, len(diags))])
		}
	})
}
