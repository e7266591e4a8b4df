package policy

import (
	"strings"
	"testing"
)

// TestKVRefusesConnectSwitches: a KV document may not hold a mesh block
// or a proxy's sidecar_for. Whether the daemon follows Consul Connect is
// decided at start from its -config files, so in KV they were planned
// ("No changes" for moving the mesh block there) and reloaded, then lost
// at the next restart: every sidecar got nothing.
func TestKVRefusesConnectSwitches(t *testing.T) {
	for src, want := range map[string]string{
		"mesh {}\n": "mesh in KV",
		"proxy \"web\" {\n  sidecar_for = \"web\"\n}\n": "sidecar_for in KV",
	} {
		if _, diags := ParseKV("xds-bridge/policy/a.hcl", []byte(src)); !diags.HasErrors() || !strings.Contains(diags.Error(), want) {
			t.Errorf("%q from KV: %v, want %q", src, diags, want)
		}
		if _, diags := Parse("a.hcl", []byte(src)); diags.HasErrors() {
			t.Errorf("%q in a file: %v", src, diags)
		}
	}
}
