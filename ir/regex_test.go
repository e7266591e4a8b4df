package ir_test

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// TestRegexProgramSizeAgainstRE2 compares the estimate with RE2's own
// ProgramSize, recorded in testdata: with CheckRegex's margin, no pattern
// RE2 sizes over Envoy's limit may pass, and the estimate must stay close.
func TestRegexProgramSizeAgainstRE2(t *testing.T) {
	f, err := os.Open("testdata/re2_program_sizes.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	n, exact := 0, 0 // exact: within 10%
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		size, pattern, _ := strings.Cut(line, "\t")
		want, err := strconv.Atoi(size)
		if err != nil {
			t.Fatalf("bad line %q", line)
		}
		got, err := ir.RegexProgramSize(pattern)
		if err != nil {
			t.Fatalf("%q: %v", pattern, err)
		}
		n++
		if d := got - want; d*10 <= want && -d*10 <= want {
			exact++
		}
		if want > ir.MaxRegexProgramSize && ir.CheckRegex(pattern) == nil {
			t.Errorf("%q: RE2's program size is %d (over Envoy's %d), but CheckRegex accepts it (estimate %d)", pattern, want, ir.MaxRegexProgramSize, got)
		}
		if got*11/10+1 < want {
			t.Errorf("%q: estimate %d is more than 10%% under RE2's %d", pattern, got, want)
		}
		if want < 1000 && got > 2*want+30 {
			t.Errorf("%q: estimate %d is far over RE2's %d", pattern, got, want)
		}
	}
	if n < 800 || exact*10 < n*6 {
		t.Fatalf("%d patterns, %d estimated within 10%%: want 60%%", n, exact)
	}
	t.Logf("%d patterns, %d estimated within 10%%", n, exact)
}

func TestCheckRegex(t *testing.T) {
	for name, tc := range map[string]struct {
		pattern string
		want    string // "" accepted, else part of the error
	}{
		"versioned api":    {pattern: `^/api/v[0-9]+/.*`},
		"uuid":             {pattern: `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`},
		"file extensions":  {pattern: `.*\.(jpg|jpeg|gif|png|webp)$`},
		"origin":           {pattern: `^https://[a-z0-9-]+\.example\.com$`},
		"unicode class":    {pattern: `\p{L}+`, want: "over Envoy's limit of 100"},
		"bounded repeat":   {pattern: `x{0,50}`, want: "over Envoy's limit of 100"},
		"does not compile": {pattern: `(a`, want: "does not compile as RE2"},
		"100 KB":           {pattern: strings.Repeat("a", 100<<10), want: "102400 bytes"},
		// RE2 sizes this one at 111.
		"long alternation": {pattern: "^/(" + strings.Join(strings.Fields("users orders items carts payments invoices shipments returns reviews ratings accounts sessions tokens profiles settings"), "|") + ")/[0-9]+$", want: "over Envoy's limit"},
	} {
		t.Run(name, func(t *testing.T) {
			err := ir.CheckRegex(tc.pattern)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
			if len(err.Error()) > 400 {
				t.Fatalf("error is %d bytes; it must quote only the start of the pattern", len(err.Error()))
			}
		})
	}
}

// FuzzRegexProgramSize: any pattern Go's regexp parses is estimated
// without panicking, at least as large as Fail and Match.
func FuzzRegexProgramSize(f *testing.F) {
	for _, p := range []string{`^/api/v[0-9]+/.*`, `\p{L}`, `(?i)straße`, `(a*)*`, `[^\x00-\x{10FFFF}]`, `x{2,5}`, `\x{D800}`} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if len(p) > ir.MaxRegexBytes {
			return
		}
		n, err := ir.RegexProgramSize(p)
		if err == nil && n < 2 {
			t.Fatalf("%q: %d", p, n)
		}
		_ = ir.CheckRegex(p)
	})
}
