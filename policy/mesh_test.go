package policy

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// TestMesh: the mesh block's defaults, its values and its diagnostics
// (at the attribute, and naming the first block of a duplicate).
func TestMesh(t *testing.T) {
	for name, tc := range map[string]struct {
		docs []string
		want *Mesh
		diag string // "file:line:col: Summary" of the first error
	}{
		"absent":      {docs: []string{`service "web" {}`}},
		"empty":       {docs: []string{"mesh {}\n"}, want: &Mesh{Mode: MeshAgent, Source: "a.hcl:1:1"}},
		"central":     {docs: []string{"mesh {\n  mode = \"central\"\n  default_intention = \"deny\"\n}\n"}, want: &Mesh{Mode: MeshCentral, DefaultIntention: ir.IntentionDeny, Source: "a.hcl:1:1"}},
		"bad mode":    {docs: []string{"mesh {\n  mode = \"sidecar\"\n}\n"}, diag: "a.hcl:2:10: Invalid mesh mode"},
		"bad default": {docs: []string{"mesh {\n  default_intention = \"maybe\"\n}\n"}, diag: "a.hcl:2:23: Invalid default_intention"},
		"duplicate":   {docs: []string{"mesh {}\n", "\nmesh {}\n"}, diag: "b.hcl:2:1: Duplicate mesh block"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, diags := loadDocs(false, tc.docs...)
			if tc.diag != "" {
				if !diags.HasErrors() {
					t.Fatalf("no error, want %s", tc.diag)
				}
				if got := FormatDiagnostics(diags)[0]; !strings.HasPrefix(got, tc.diag) {
					t.Fatalf("got %q, want %s", got, tc.diag)
				}
				if d := FormatDiagnostics(diags)[0]; name == "duplicate" && !strings.Contains(d, "a.hcl:1:1") {
					t.Errorf("duplicate does not name the first block: %s", d)
				}
				return
			}
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			got := cfg.Policy.Mesh
			if got != nil {
				// ModeRange points at mode (the block without one), for
				// CheckKeyTransport's diagnostics.
				if want := map[bool]int{true: 2, false: 1}[name == "central"]; got.ModeRange.Start.Line != want {
					t.Errorf("ModeRange %v, want line %d", got.ModeRange, want)
				}
				g := *got
				g.ModeRange = hcl.Range{}
				got = &g
			}
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Fatalf("mesh = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestSidecarFor: a sidecar_for group declares nothing of its own.
func TestSidecarFor(t *testing.T) {
	cfg, diags := loadDocs(false, "proxy \"web-sidecar\" {\n  sidecar_for = \"web\"\n}\n")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if p := cfg.Policy.Proxies[0]; p.SidecarFor != "web" {
		t.Fatalf("SidecarFor = %q", p.SidecarFor)
	}
	for name, tc := range map[string]struct{ src, diag string }{
		"listener":  {"proxy \"p\" {\n  sidecar_for = \"web\"\n  listener \"l\" {\n    port = 1\n  }\n}\n", "a.hcl:2:17: sidecar_for with listener blocks"},
		"upstreams": {"proxy \"p\" {\n  sidecar_for = \"web\"\n  upstreams = [\"api\"]\n}\n", "a.hcl:2:17: sidecar_for with upstreams"},
		"bad name":  {"proxy \"p\" {\n  sidecar_for = \"a b\"\n}\n", "a.hcl:2:17: Invalid service name"},
		"reserved":  {"\nproxy \"sidecar:x\" {\n  upstreams = [\"api\"]\n}\n", "a.hcl:2:1: Reserved proxy group name"},
	} {
		t.Run(name, func(t *testing.T) {
			_, diags := loadDocs(false, tc.src)
			if !diags.HasErrors() {
				t.Fatalf("no error, want %s", tc.diag)
			}
			if got := FormatDiagnostics(diags)[0]; !strings.HasPrefix(got, tc.diag) {
				t.Fatalf("got %q, want %s", got, tc.diag)
			}
		})
	}
}
