package policy

import (
	"strings"
	"testing"
	"time"
)

// TestDeepNestingIsADiagnostic: documents nested far deeper than any
// policy (which used to overflow the parser's stack and kill the process)
// are rejected with a diagnostic at the offending token, quickly; a
// document at a sensible depth still parses.
func TestDeepNestingIsADiagnostic(t *testing.T) {
	const n = 60000
	deep := map[string]string{
		"brackets":  "a = " + strings.Repeat("[", n) + strings.Repeat("]", n) + "\n",
		"parens":    "a = " + strings.Repeat("(", n) + "1" + strings.Repeat(")", n) + "\n",
		"objects":   "a = " + strings.Repeat("{b = ", n) + "1" + strings.Repeat("}", n) + "\n",
		"blocks":    strings.Repeat("b {\n", n) + strings.Repeat("}\n", n),
		"unary":     "a = " + strings.Repeat("!", n) + "true\n",
		"minus":     "a = " + strings.Repeat("- ", n) + "1\n",
		"templates": "a = " + strings.Repeat(`"${`, n) + "1" + strings.Repeat(`}"`, n) + "\n",
		"unclosed":  "a = " + strings.Repeat("[", n) + "\n",
	}
	for name, src := range deep {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			doc, diags := Parse("deep.hcl", []byte(src))
			if doc != nil || !diags.HasErrors() || diags[0].Summary != "Too deeply nested" {
				t.Fatalf("Parse = %v, %v; want the nesting diagnostic", doc, diags)
			}
			if s := diags[0].Subject; s == nil || s.Filename != "deep.hcl" || s.Start.Line < 1 {
				t.Errorf("diagnostic subject %v, want a position in deep.hcl", s)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
	ok := "a = " + strings.Repeat("[", 20) + strings.Repeat("]", 20) + "\nb = \"${\"x\"}\"\nc = !!true\n"
	for _, d := range func() []string {
		_, diags := Parse("ok.hcl", []byte(ok))
		var s []string
		for _, d := range diags {
			s = append(s, d.Summary)
		}
		return s
	}() {
		if d == "Too deeply nested" {
			t.Errorf("a document 20 levels deep was refused as too deeply nested")
		}
	}
}
