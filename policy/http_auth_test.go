package policy

import (
	"os"
	"strings"
	"testing"
	"time"
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
		// --- jwt ---
		"jwt_provider without a key set": {
			docs:   []string{authListener("    jwt_provider \"corp\" {\n      issuer = \"https://auth.example.com\"\n    }", "")},
			want:   "a.hcl:4:5: Invalid jwt_provider key set",
			detail: "exactly one of them",
		},
		"jwt_provider jwks_url without a service": {
			docs:   []string{authListener("    jwt_provider \"corp\" {\n      issuer = \"https://auth.example.com\"\n      jwks_file = \"/etc/jwks.json\"\n      jwks_url = \"https://auth.example.com/jwks\"\n    }", "")},
			want:   "a.hcl:7:18: jwks_url without jwks_service",
			detail: "register the identity provider as a Consul service",
		},
		"jwt_provider jwks_url not a URL": {
			docs:   []string{authListener("    jwt_provider \"corp\" {\n      issuer = \"https://auth.example.com\"\n      jwks_service = \"auth\"\n      jwks_url = \"auth/jwks\"\n    }", "")},
			want:   "a.hcl:7:18: Invalid jwks_url",
			detail: "not an http or https URL",
		},
		"jwt_provider duplicate": {
			docs:   []string{authListener("    jwt_provider \"corp\" {\n      issuer = \"a\"\n      jwks_service = \"auth\"\n    }\n    jwt_provider \"corp\" {\n      issuer = \"b\"\n      jwks_service = \"auth\"\n    }", "")},
			want:   "a.hcl:8:5: Duplicate jwt_provider",
			detail: "already defined at a.hcl:4",
		},
		"jwt_provider claim header invalid": {
			docs:   []string{authListener("    jwt_provider \"corp\" {\n      issuer = \"a\"\n      jwks_service = \"auth\"\n      claim_headers = { sub = \"x user\" }\n    }", "")},
			want:   "a.hcl:7:25: Invalid header name",
			detail: `claim "sub"`,
		},
		"jwt unknown provider": {
			docs:   []string{authListener("", "        jwt {\n          provider = \"corp\"\n        }")},
			want:   "a.hcl:9:22: Unknown JWT provider",
			detail: `no jwt_provider "corp"`,
		},
		"jwt provider and bypass": {
			docs:   []string{authListener("", "        jwt {\n          bypass = true\n          allow_missing = true\n        }")},
			want:   "a.hcl:10:27: Invalid jwt",
			detail: "not to bypass",
		},
		"jwt on a tcp listener": {
			docs:   []string{inListener("    port = 5432\n    protocol = \"tcp\"\n    service = \"db\"\n    jwt_provider \"corp\" {\n      issuer = \"a\"\n      jwks_service = \"auth\"\n    }")},
			want:   "a.hcl:6:5: jwt_provider on a tcp listener",
			detail: "tokens are verified in HTTP requests",
		},
		"jwt in a grpc_service": {
			docs:   []string{inGRPC("    service = \"echo\"\n    jwt {\n      bypass = true\n    }", "")},
			want:   "a.hcl:4:5: Unsupported in a grpc_service",
			detail: "no JWT authentication filter",
		},
		// --- global rate limit ---
		"rate_limit_service failure_mode unknown": {
			docs:   []string{authListener("    rate_limit_service {\n      service = \"rl\"\n      domain = \"edge\"\n      failure_mode = \"closed\"\n    }", "")},
			want:   "a.hcl:7:22: Invalid failure_mode",
			detail: `"deny", "allow"`,
		},
		"rate_limit_service empty domain": {
			docs:   []string{authListener("    rate_limit_service {\n      service = \"rl\"\n      domain = \"\"\n    }", "")},
			want:   "a.hcl:6:16: Empty domain",
			detail: "configuration",
		},
		"rate_limit_service without http2": {
			docs:   []string{authListener("    rate_limit_service {\n      service = \"rl\"\n      domain = \"edge\"\n    }", "") + "service \"rl\" {\n  http2 = false\n}\n"},
			want:   "a.hcl:5:17: gRPC service without http2",
			detail: "rate_limit_service",
		},
		"global_rate_limit without a service": {
			docs:   []string{authListener("", "        global_rate_limit {\n          descriptor {\n            entry {\n              client_address = true\n            }\n          }\n        }")},
			want:   "a.hcl:8:9: global_rate_limit without a rate_limit_service",
			detail: "add one to the listener",
		},
		"global entry with two kinds": {
			docs:   []string{authListener("    rate_limit_service {\n      service = \"rl\"\n      domain = \"edge\"\n    }", "        global_rate_limit {\n          descriptor {\n            entry {\n              header = \"x-user\"\n              generic_key = \"a\"\n            }\n          }\n        }")},
			want:   "a.hcl:13:13: Invalid entry",
			detail: "exactly one of them",
		},
		"global entry bad header": {
			docs:   []string{authListener("    rate_limit_service {\n      service = \"rl\"\n      domain = \"edge\"\n    }", "        global_rate_limit {\n          descriptor {\n            entry {\n              header = \"x user\"\n            }\n          }\n        }")},
			want:   "a.hcl:14:24: Invalid header name",
			detail: `"x user"`,
		},
		"global descriptor without entries": {
			docs:   []string{authListener("    rate_limit_service {\n      service = \"rl\"\n      domain = \"edge\"\n    }", "        global_rate_limit {\n          descriptor {\n          }\n        }")},
			want:   "a.hcl:12:11: Descriptor without entries",
			detail: "in order",
		},
		"rate_limit_service on a tcp listener": {
			docs:   []string{inListener("    port = 5432\n    protocol = \"tcp\"\n    service = \"db\"\n    rate_limit_service {\n      service = \"rl\"\n      domain = \"d\"\n    }")},
			want:   "a.hcl:6:5: rate_limit_service on a tcp listener",
			detail: "counts HTTP requests",
		},
		"global_rate_limit in a grpc_service": {
			docs:   []string{inGRPC("    service = \"echo\"\n    global_rate_limit {\n      descriptor {\n        entry {\n          client_address = true\n        }\n      }\n    }", "")},
			want:   "a.hcl:4:5: Unsupported in a grpc_service",
			detail: "no rate limit filter",
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

// A local key set is read by ReadFiles, checked, and sent inline; a file
// that is no JWKS is an error at the attribute that names it.
func TestJWKSFile(t *testing.T) {
	dir := t.TempDir()
	good, bad := dir+"/good.json", dir+"/bad.json"
	if err := os.WriteFile(good, []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"keys":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := func(path string) string {
		return authListener("    jwt_provider \"p\" {\n      issuer = \"a\"\n      jwks_file = \""+path+"\"\n    }", "")
	}
	cfg, diags := loadDocs(false, doc(good))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if diags := cfg.Policy.ReadFiles(time.Now()); diags.HasErrors() {
		t.Fatal(diags)
	}
	if got := cfg.Policy.Proxies[0].Listeners[0].HTTP.JWTProviders[0].LocalJWKS; !strings.Contains(got, `"kty":"oct"`) {
		t.Errorf("LocalJWKS = %q", got)
	}
	cfg, _ = loadDocs(false, doc(bad))
	diags = cfg.Policy.ReadFiles(time.Now())
	if len(diags) != 1 || !strings.HasPrefix(FormatDiagnostics(diags)[0], "a.hcl:6:19: Invalid JWKS file") {
		t.Errorf("diagnostics = %v", FormatDiagnostics(diags))
	}
}
