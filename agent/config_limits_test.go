package agent

import (
	"fmt"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// TestParseConfigRefusesOversized: an agent configuration over a policy
// document's limit is refused before it is parsed, with its size, and one
// at the limit is parsed (the limit is not off by one). The file is read
// with the same limit (cmd's readAgentConfig); this covers whoever calls
// ParseConfig with bytes from elsewhere.
func TestParseConfigRefusesOversized(t *testing.T) {
	base := "allow_groups = [\"*\"]\nupstream {\n  addresses = [\"a:1\"]\n}\n"
	// A comment pads a valid configuration to n bytes.
	padded := func(n int) []byte {
		return []byte(base + "#" + strings.Repeat("x", n-len(base)-2) + "\n")
	}
	for name, tc := range map[string]struct {
		size int
		want string // "" for no error
	}{
		"at the limit":   {policy.MaxDocumentBytes, ""},
		"one byte over":  {policy.MaxDocumentBytes + 1, fmt.Sprintf("agent.hcl:0:0: Configuration too large: %d bytes is over the limit of %d", policy.MaxDocumentBytes+1, policy.MaxDocumentBytes)},
		"64 MiB of text": {64 << 20, fmt.Sprintf("Configuration too large: %d bytes is over the limit of %d", 64<<20, policy.MaxDocumentBytes)},
	} {
		t.Run(name, func(t *testing.T) {
			src := padded(tc.size)
			if len(src) != tc.size {
				t.Fatalf("padded to %d bytes, want %d", len(src), tc.size)
			}
			_, diags := ParseConfig("agent.hcl", src)
			got := diagText(diags)
			switch {
			case tc.want == "" && diags.HasErrors():
				t.Errorf("refused: %s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("diagnostics %q, want %q", got, tc.want)
			}
		})
	}
}

// TestParseConfigRefusesDeepNesting: an agent configuration nested
// deeper than any needs is refused with a diagnostic at the token that
// goes too deep; hcl's parser, which recurses per level, would overflow
// the goroutine stack on it (a fatal error, no recover), as it does on a
// 1 MiB file of brackets.
func TestParseConfigRefusesDeepNesting(t *testing.T) {
	src := []byte("allow_groups = " + strings.Repeat("[", 500_000) + "\n")
	_, diags := ParseConfig("agent.hcl", src)
	if got := diagText(diags); !strings.Contains(got, "agent.hcl:1:") || !strings.Contains(got, "Too deeply nested") {
		t.Fatalf("diagnostics %q, want Too deeply nested at agent.hcl:1", got)
	}
}
