package policy

import (
	"strings"
	"testing"
)

// TestTagRouteOwnersDiagnostics: tag_routes owners keys are hosts, "*" or
// "/PATH", each once compared case-insensitively (as Envoy compares
// hosts); a good block reaches the listener.
func TestTagRouteOwnersDiagnostics(t *testing.T) {
	tests := map[string]struct {
		owners string
		want   []string // substrings of the error lines, "" for none
	}{
		"good":             {owners: `{ "shop.example.com" = ["web", "api"], "*" = ["web"], "/api" = ["api"], "locked.example.com" = [] }`},
		"same host twice":  {owners: `{ "Shop.example.com" = ["web"], "shop.example.com" = ["api"] }`, want: []string{`owners keys "Shop.example.com" and "shop.example.com" are the same host`}},
		"host with a path": {owners: `{ "shop.example.com/api" = ["api"] }`, want: []string{`owners key "shop.example.com/api" is not a host`}},
		"empty service":    {owners: `{ "shop.example.com" = [""] }`, want: []string{`owners["shop.example.com"] lists an empty service name`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			src := "proxy \"edge\" {\n  listener \"http\" {\n    port = 8080\n    tag_routes {\n      format = \"fabio\"\n      owners = " + tc.owners + "\n    }\n  }\n}\n"
			doc, diags := Parse("p.hcl", []byte(src))
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			cfg, diags := Merge(doc)
			lines := strings.Join(FormatDiagnostics(diags), "\n")
			if len(tc.want) == 0 {
				if diags.HasErrors() {
					t.Fatalf("unexpected errors: %s", lines)
				}
				if got := cfg.Policy.Proxies[0].Listeners[0].TagRouteOwners["shop.example.com"]; strings.Join(got, ",") != "web,api" {
					t.Errorf("owners not on the listener: %v", cfg.Policy.Proxies[0].Listeners[0].TagRouteOwners)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(lines, w) || !strings.Contains(lines, "p.hcl:6:") {
					t.Errorf("diagnostics lack %q at the owners line (p.hcl:6):\n%s", w, lines)
				}
			}
		})
	}
}
