package policy

import (
	"strings"
	"testing"
)

// TestCheckKeyTransport: a policy that makes the bridge send a private
// key (central mesh, edge or upstream TLS key) needs mTLS with
// authorize_nodes or a closed Unix socket; the error names the place the
// key is declared and the setting to change.
func TestCheckKeyTransport(t *testing.T) {
	const (
		central  = "mesh {\n  mode = \"central\"\n}\n"
		agent    = "mesh {\n  mode = \"agent\"\n}\n"
		upstream = "service \"api\" {\n  tls {\n    cert_file = \"/etc/b/c.pem\"\n    key_file  = \"/etc/b/k.pem\"\n  }\n}\n"
		edge     = "proxy \"edge\" {\n  listener \"https\" {\n    port = 8443\n    tls {\n      certificate \"a\" {\n        cert_file = \"/etc/b/e.pem\"\n        key_file  = \"/etc/b/ek.pem\"\n      }\n    }\n    virtual_host \"a\" {\n      domains = [\"*\"]\n      route {\n        service = \"api\"\n      }\n    }\n  }\n}\n"
		caOnly   = "service \"api\" {\n  tls {\n    ca_file = \"/etc/b/ca.pem\"\n  }\n}\n"
	)
	plaintext := "xds {\n  listen = \"0.0.0.0:18000\"\n}\n"
	tlsOnly := "xds {\n  listen = \"0.0.0.0:18000\"\n  tls {\n    cert_file = \"/s.pem\"\n    key_file = \"/s-key.pem\"\n  }\n}\n"
	mtls := "xds {\n  listen = \"0.0.0.0:18000\"\n  tls {\n    cert_file = \"/s.pem\"\n    key_file = \"/s-key.pem\"\n    client_ca_file = \"/ca.pem\"\n  }\n}\n"
	mtlsAuthz := "xds {\n  listen = \"0.0.0.0:18000\"\n  authorize_nodes = true\n  tls {\n    cert_file = \"/s.pem\"\n    key_file = \"/s-key.pem\"\n    client_ca_file = \"/ca.pem\"\n  }\n}\n"
	unixClosed := "xds {\n  listen = \"unix:///run/b/xds.sock\"\n}\n"
	unixOpen := "xds {\n  listen = \"unix:///run/b/xds.sock\"\n  socket_mode = \"0666\"\n}\n"
	lab := "xds {\n  listen = \"0.0.0.0:18000\"\n  insecure_serve_keys = true\n}\n"

	cases := map[string]struct {
		src       string
		wantLines []int // lines of the errors, in order; nil: accepted
		wantText  string
	}{
		"central mesh over plaintext":                       {src: plaintext + central, wantLines: []int{5}, wantText: "authorize_nodes"},
		"central mesh over TLS without client certificates": {src: tlsOnly + central, wantLines: []int{9}, wantText: "client_ca_file"},
		"central mesh over mTLS without authorize_nodes":    {src: mtls + central, wantLines: []int{10}, wantText: "authorize_nodes = true"},
		"central mesh over mTLS with authorize_nodes":       {src: mtlsAuthz + central},
		"central mesh over a closed Unix socket":            {src: unixClosed + central},
		"central mesh over a world-open Unix socket":        {src: unixOpen + central, wantLines: []int{6}, wantText: "socket_mode 0666"},
		"agent mesh over plaintext":                         {src: plaintext + agent},
		"upstream TLS key over plaintext":                   {src: plaintext + upstream, wantLines: []int{7}, wantText: "/etc/b/k.pem"},
		"edge TLS key over plaintext":                       {src: plaintext + edge, wantLines: []int{10}, wantText: "/etc/b/ek.pem"},
		"a CA alone over plaintext":                         {src: plaintext + caOnly},
		"lab switch":                                        {src: lab + central + upstream},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			doc, diags := Parse("/etc/b/config.hcl", []byte(tc.src))
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			cfg, diags := Merge(doc)
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			got := CheckKeyTransport(cfg.Settings.XDS, cfg.Policy)
			var lines []int
			for _, d := range got {
				lines = append(lines, d.Subject.Start.Line)
				if !strings.Contains(d.Detail, tc.wantText) || !strings.Contains(d.Detail, "insecure_serve_keys") {
					t.Errorf("detail %q: want it to name %q and the lab switch", d.Detail, tc.wantText)
				}
			}
			if len(lines) != len(tc.wantLines) || (len(lines) > 0 && lines[0] != tc.wantLines[0]) {
				t.Errorf("errors at lines %v, want %v: %v", lines, tc.wantLines, got)
			}
		})
	}
}
