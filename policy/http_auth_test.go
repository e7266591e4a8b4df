package policy

import (
	"strings"
	"testing"
)

// authListener is an http listener "l" on port 8080 with block (starting
// on line 4) before one virtual host whose route has route (after line
// 4+lines(block)+3).
func authListener(block, route string) string {
	return inListener("    port = 8080\n" + block + "\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n" + route + "\n      }\n    }")
}

func TestAuthFilterDiagnostics(t *testing.T) {
	tests := map[string]struct {
		docs         []string
		want, detail string
	}{
		// --- ext_authz ---
		"ext_authz failure_mode unknown": {
			docs:   []string{authListener("    ext_authz {\n      service = \"authz\"\n      failure_mode = \"open\"\n    }", "")},
			want:   "a.hcl:6:22: Invalid failure_mode",
			detail: `"deny", "allow"`,
		},
		"ext_authz timeout in microseconds": {
			docs:   []string{authListener("    ext_authz {\n      service = \"authz\"\n      timeout = \"1500us\"\n    }", "")},
			want:   "a.hcl:6:17: Invalid timeout",
			detail: "positive whole number of milliseconds",
		},
		"ext_authz header invalid": {
			docs:   []string{authListener("    ext_authz {\n      service = \"authz\"\n      headers = [\"cookie\", \"bad header\"]\n    }", "")},
			want:   "a.hcl:6:28: Invalid header name",
			detail: `"bad header"`,
		},
		"ext_authz service with a subset": {
			docs:   []string{authListener("    ext_authz {\n      service = \"authz.v2\"\n    }", "")},
			want:   "a.hcl:5:17: Invalid service name",
			detail: "ext_authz service",
		},
		"ext_authz service without http2": {
			docs:   []string{authListener("    ext_authz {\n      service = \"authz\"\n    }", "") + "service \"authz\" {\n  http2 = false\n}\n"},
			want:   "a.hcl:5:17: gRPC service without http2",
			detail: "ext_authz service",
		},
		"ext_authz on a tcp listener": {
			docs:   []string{inListener("    port = 5432\n    protocol = \"tcp\"\n    service = \"db\"\n    ext_authz {\n      service = \"authz\"\n    }")},
			want:   "a.hcl:6:5: ext_authz on a tcp listener",
			detail: "checks HTTP requests",
		},
		"ext_authz in a grpc_service": {
			docs:   []string{inGRPC("    service = \"echo\"\n    ext_authz = false", "")},
			want:   "a.hcl:4:17: Unsupported in a grpc_service",
			detail: "no external authorization filter",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) { checkFirst(t, tc.docs, tc.want, tc.detail) })
	}
}

func TestAuthFilterWarnings(t *testing.T) {
	cfg, diags := loadDocs(false, authListener("", "        ext_authz = false"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if len(diags) != 1 || !strings.HasPrefix(FormatDiagnostics(diags)[0], "a.hcl:8:21: warning: ext_authz on a route of a listener without one") {
		t.Errorf("diagnostics = %v", FormatDiagnostics(diags))
	}
	if !cfg.Policy.Proxies[0].Listeners[0].VirtualHosts[0].Routes[0].HTTP.NoExtAuthz {
		t.Error("route without NoExtAuthz")
	}
}
