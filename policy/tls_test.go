package policy

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/testpki"
	"github.com/hashicorp/hcl/v2"
)

// inTLSListener is an edge listener "https" whose tls block holds tlsBody
// (starting on line 5) followed by virtual hosts.
func inTLSListener(tlsBody, vhosts string) string {
	return `proxy "edge" {
  listener "https" {
    port = 8443
    tls {
` + tlsBody + `
    }
` + vhosts + `
  }
}
`
}

const twoCerts = `      certificate "shop" {
        cert_file = "/tls/shop.pem"
        key_file  = "/tls/shop-key.pem"
      }
      certificate "blog" {
        cert_file = "/tls/blog.pem"
        key_file  = "/tls/blog-key.pem"
      }`

func vhost(name, domains, cert string) string {
	tls := ""
	if cert != "" {
		tls = "      tls {\n        certificate = \"" + cert + "\"\n      }\n"
	}
	return "    virtual_host \"" + name + "\" {\n      domains = " + domains + "\n" + tls + "      route {\n        service = \"web\"\n      }\n    }\n"
}

// TestTLSDiagnostics: the pure checks of tls blocks, each at the value
// it is about.
func TestTLSDiagnostics(t *testing.T) {
	tests := map[string]struct {
		docs   []string
		kv     bool
		want   string
		detail string
	}{
		"no certificate": {
			docs:   []string{inTLSListener(`      min_version = "1.2"`, vhost("v", `["*"]`, ""))},
			want:   "a.hcl:4:5: TLS without a certificate",
			detail: `certificate "NAME"`,
		},
		"duplicate certificate": {
			docs:   []string{inTLSListener(twoCerts+"\n      certificate \"shop\" {\n        cert_file = \"/a\"\n        key_file = \"/b\"\n      }", vhost("v", `["*"]`, ""))},
			want:   "a.hcl:13:7: Duplicate certificate",
			detail: "already defined at a.hcl:5:7",
		},
		"certificate name with a dot": {
			docs:   []string{inTLSListener("      certificate \"shop.v2\" {\n        cert_file = \"/a\"\n        key_file = \"/b\"\n      }", vhost("v", `["*"]`, ""))},
			want:   "a.hcl:5:7: Invalid certificate name",
			detail: `"edge.https/cert/shop.v2"`,
		},
		"missing key_file": {
			docs: []string{inTLSListener("      certificate \"shop\" {\n        cert_file = \"/a\"\n      }", vhost("v", `["*"]`, ""))},
			want: "a.hcl:5:26: Missing required argument",
		},
		"unknown default_certificate": {
			docs:   []string{inTLSListener(twoCerts+"\n      default_certificate = \"news\"", vhost("v", `["*"]`, ""))},
			want:   "a.hcl:13:29: Unknown certificate",
			detail: `declared: "blog", "shop"`,
		},
		"bad min_version": {
			docs:   []string{inTLSListener(twoCerts+"\n      min_version = \"TLSv1.2\"", vhost("v", `["*"]`, ""))},
			want:   "a.hcl:13:21: Invalid TLS version",
			detail: `"1.0", "1.1", "1.2", "1.3"`,
		},
		"max below min": {
			docs:   []string{inTLSListener(twoCerts+"\n      min_version = \"1.3\"\n      max_version = \"1.2\"", vhost("v", `["*"]`, ""))},
			want:   "a.hcl:14:21: Invalid TLS versions",
			detail: "below min_version",
		},
		"empty alpn": {
			docs:   []string{inTLSListener(twoCerts+"\n      alpn = [\"h2\", \"\"]", vhost("v", `["*"]`, ""))},
			want:   "a.hcl:13:21: Invalid ALPN protocol",
			detail: "once each",
		},
		"virtual_host tls on a plaintext listener": {
			docs:   []string{"proxy \"edge\" {\n  listener \"http\" {\n    port = 80\n" + vhost("v", `["a.example"]`, "shop") + "  }\n}\n"},
			want:   "a.hcl:6:7: tls on a virtual_host of a plaintext listener",
			detail: "add tls { certificate",
		},
		"unknown virtual_host certificate": {
			docs:   []string{inTLSListener(twoCerts, vhost("v", `["a.example"]`, "news"))},
			want:   "a.hcl:17:23: Unknown certificate",
			detail: `declared: "shop", "blog"`,
		},
		"catch-all domain selects a certificate": {
			docs:   []string{inTLSListener(twoCerts, vhost("v", `["*"]`, "blog"))},
			want:   "a.hcl:15:18: Domain cannot select a certificate",
			detail: `Set default_certificate = "blog"`,
		},
		"suffix wildcard selects a certificate": {
			docs:   []string{inTLSListener(twoCerts, vhost("v", `["blog.example.com", "blog.*"]`, "blog"))},
			want:   "a.hcl:15:38: Domain cannot select a certificate",
			detail: `domain "blog.*" cannot select it`,
		},
		"same server name, two certificates": {
			docs:   []string{inTLSListener(twoCerts, vhost("a", `["blog.example.com"]`, "blog")+vhost("b", `["Blog.example.com:8443"]`, "shop"))},
			want:   "a.hcl:24:18: Conflicting certificates for a server name",
			detail: `"blog.example.com" selects certificate "shop" here but "blog" in virtual_host "a" at a.hcl:15:18`,
		},
		"relative path in KV": {
			kv:     true,
			docs:   []string{inTLSListener("      certificate \"shop\" {\n        cert_file = \"tls/shop.pem\"\n        key_file  = \"/tls/shop-key.pem\"\n      }", vhost("v", `["*"]`, ""))},
			want:   "xds-bridge/policy/a:6:21: Relative path in KV",
			detail: "write an absolute path",
		},
		"empty ca_file": {
			docs:   []string{"service \"api\" {\n  tls {\n    ca_file = \"\"\n  }\n}\n"},
			want:   "a.hcl:3:15: Empty file name",
			detail: "ca_file must name a PEM file",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, diags := loadDocs(tc.kv, tc.docs...)
			if !diags.HasErrors() {
				t.Fatalf("no error; policy: %+v", cfg.Policy)
			}
			first := diags.Errs()[0].(*hcl.Diagnostic)
			if got := firstLine(first); got != tc.want {
				t.Errorf("first error = %q\n            want %q\nall:\n  %s", got, tc.want, strings.Join(FormatDiagnostics(diags), "\n  "))
			}
			if !strings.Contains(first.Detail, tc.detail) {
				t.Errorf("detail = %q\nwant it to contain %q", first.Detail, tc.detail)
			}
		})
	}
}

// TestTLSResolvesSNI: which server names select which certificate, the
// defaults, and paths relative to the document.
func TestTLSResolvesSNI(t *testing.T) {
	src := inTLSListener(twoCerts+"\n      client_ca_file = \"ca/clients.pem\"",
		vhost("shop", `["shop.example.com", "*.shop.example.com", "shop.*"]`, "")+
			vhost("blog", `["blog.example.com", "BLOG.example.com:8443", "*.blog.example.com"]`, "blog")+
			vhost("all", `["*"]`, "shop"))
	cfg, diags := loadDocs(false, src)
	if diags.HasErrors() || len(diags) > 0 {
		t.Fatalf("diagnostics: %s", FormatDiagnostics(diags))
	}
	l := cfg.Policy.Proxies[0].Listeners[0]
	tls := l.TLS
	if tls.Default != "shop" || !slices.Equal(tls.ALPN, []string{"h2", "http/1.1"}) || tls.MinVersion != "" {
		t.Errorf("defaults: default %q alpn %v min %q", tls.Default, tls.ALPN, tls.MinVersion)
	}
	want := []SNICertificate{
		{Certificate: "blog", ServerNames: []string{"*.blog.example.com", "blog.example.com"}},
		// The default's own names are listed, so *.blog cannot take
		// them; "shop.*" and "*" fall to the default chain.
		{Certificate: "shop", ServerNames: []string{"*.shop.example.com", "shop.example.com"}},
	}
	if len(tls.SNI) != len(want) {
		t.Fatalf("SNI = %+v, want %+v", tls.SNI, want)
	}
	for i := range want {
		if tls.SNI[i].Certificate != want[i].Certificate || !slices.Equal(tls.SNI[i].ServerNames, want[i].ServerNames) {
			t.Errorf("SNI[%d] = %+v, want %+v", i, tls.SNI[i], want[i])
		}
	}
	if tls.ClientCA == nil || tls.ClientCA.Path != "ca/clients.pem" || tls.ClientCA.Kind != PEMCA {
		t.Errorf("client CA = %+v (relative to a.hcl, in the working directory)", tls.ClientCA)
	}
	if l.VirtualHosts[1].Certificate != "blog" {
		t.Errorf("virtual host certificate = %q", l.VirtualHosts[1].Certificate)
	}
	if files := cfg.Policy.Files(); len(files) != 5 {
		t.Errorf("Files() = %d files, want 5 (two pairs and the CA)", len(files))
	}

	// Only the default in use: one chain, no SNI; tcp gets no ALPN; an
	// unused certificate is a warning.
	cfg, diags = loadDocs(false, `proxy "db" {
  listener "pg" {
    port     = 5433
    protocol = "tcp"
    service  = "postgres"
    tls {
`+twoCerts+`
    }
  }
}
`)
	if diags.HasErrors() {
		t.Fatal(FormatDiagnostics(diags))
	}
	if got := FormatDiagnostics(diags); len(got) != 1 || !strings.HasPrefix(got[0], "a.hcl:11:7: warning: Unused certificate") {
		t.Errorf("diagnostics = %q, want one unused-certificate warning", got)
	}
	tls = cfg.Policy.Proxies[0].Listeners[0].TLS
	if tls.SNI != nil || tls.ALPN != nil || tls.Default != "shop" {
		t.Errorf("tcp listener TLS = %+v", tls)
	}

	// A file's relative path is relative to the file; absolute paths stay.
	dir := t.TempDir()
	writePolicy(t, dir, "conf.d/edge.hcl", `service "api" {
  tls {
    ca_file   = "../pki/ca.pem"
    cert_file = "/etc/pki/client.pem"
    key_file  = "client-key.pem"
  }
}
`)
	docs := parseFile(t, filepath.Join(dir, "conf.d/edge.hcl"))
	cfg, diags = Merge(docs)
	if diags.HasErrors() {
		t.Fatal(FormatDiagnostics(diags))
	}
	up := cfg.Policy.Services[0].TLS
	if up.CA.Path != filepath.Join(dir, "pki/ca.pem") || up.Cert.Path != "/etc/pki/client.pem" || up.Key.Path != filepath.Join(dir, "conf.d/client-key.pem") {
		t.Errorf("paths: %q %q %q", up.CA.Path, up.Cert.Path, up.Key.Path)
	}
}

func writePolicy(t *testing.T, dir, name, src string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func parseFile(t *testing.T, path string) *Document {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d, diags := Parse(path, src)
	if diags.HasErrors() {
		t.Fatal(FormatDiagnostics(diags))
	}
	return d
}

// testPKI adapts testpki to the file tests.
type testPKI struct {
	*testpki.CA
	pem  []byte
	cert *x509.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	ca := testpki.New(t)
	return &testPKI{CA: ca, pem: ca.PEM, cert: ca.Cert}
}

// issue returns a PEM certificate for dns valid from notBefore to
// notAfter, and its PKCS #8 key.
func (ca *testPKI) issue(dns string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte) {
	return ca.Issue(testpki.Leaf{DNS: []string{dns}, NotBefore: notBefore, NotAfter: notAfter})
}

// TestReadFiles: the file checks of Policy.ReadFiles, through LoadFiles
// as `validate` runs them. Each problem is one diagnostic at the path
// that names the file, and no diagnostic ever quotes a key.
func TestReadFiles(t *testing.T) {
	ca := newTestPKI(t)
	now := time.Now()
	goodCert, goodKey := ca.issue("shop.example.com", now.Add(-time.Hour), now.Add(time.Hour))
	_, otherKey := ca.issue("blog.example.com", now.Add(-time.Hour), now.Add(time.Hour))
	oldCert, oldKey := ca.issue("old.example.com", now.Add(-2*time.Hour), now.Add(-time.Hour))
	futureCert, futureKey := ca.issue("new.example.com", now.Add(time.Hour), now.Add(2*time.Hour))
	encKey := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,00"}, Bytes: []byte("x")})

	policyFor := func(cert, key string) string {
		return inTLSListener("      certificate \"shop\" {\n        cert_file = \""+cert+"\"\n        key_file  = \""+key+"\"\n      }\n      client_ca_file = \"ca.pem\"", vhost("v", `["*"]`, ""))
	}
	tests := map[string]struct {
		files map[string][]byte // name -> contents (keys get mode 0600 unless named *-loose.pem)
		cert  string
		key   string
		want  []string // FormatDiagnostics prefixes, in order
	}{
		"valid": {
			files: map[string][]byte{"shop.pem": goodCert, "shop-key.pem": goodKey},
			cert:  "shop.pem", key: "shop-key.pem",
		},
		"missing certificate file": {
			files: map[string][]byte{"shop-key.pem": goodKey},
			cert:  "nope.pem", key: "shop-key.pem",
			want: []string{"%s:6:21: Cannot read certificate file: %s/nope.pem: no such file or directory"},
		},
		"key does not match": {
			files: map[string][]byte{"shop.pem": goodCert, "other-key.pem": otherKey},
			cert:  "shop.pem", key: "other-key.pem",
			want: []string{"%s:7:21: Key does not match certificate: %s/other-key.pem is not the private key of the certificate in %s/shop.pem (private key does not match public key)"},
		},
		"expired certificate": {
			files: map[string][]byte{"old.pem": oldCert, "old-key.pem": oldKey},
			cert:  "old.pem", key: "old-key.pem",
			want: []string{`%s:6:21: Expired certificate: %s/old.pem: the certificate for "old.example.com" expired at`},
		},
		"not yet valid is a warning": {
			files: map[string][]byte{"new.pem": futureCert, "new-key.pem": futureKey},
			cert:  "new.pem", key: "new-key.pem",
			want: []string{`%s:6:21: warning: Certificate not valid yet: %s/new.pem: the certificate for "new.example.com" is valid from`},
		},
		"not PEM": {
			files: map[string][]byte{"shop.pem": []byte("hello\n"), "shop-key.pem": goodKey},
			cert:  "shop.pem", key: "shop-key.pem",
			want: []string{"%s:6:21: Invalid PEM: %s/shop.pem holds no PEM certificate"},
		},
		"truncated PEM": {
			files: map[string][]byte{"shop.pem": goodCert[:len(goodCert)-30], "shop-key.pem": goodKey},
			cert:  "shop.pem", key: "shop-key.pem",
			want: []string{"%s:6:21: Invalid PEM: %s/shop.pem holds no PEM certificate"},
		},
		"garbage certificate": {
			files: map[string][]byte{"shop.pem": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")}), "shop-key.pem": goodKey},
			cert:  "shop.pem", key: "shop-key.pem",
			want: []string{"%s:6:21: Invalid certificate: %s/shop.pem: certificate 1 does not parse"},
		},
		"key in the certificate file": {
			files: map[string][]byte{"shop.pem": append(slices.Clone(goodCert), goodKey...), "shop-key.pem": goodKey},
			cert:  "shop.pem", key: "shop-key.pem",
			want: []string{"%s:6:21: Private key in a certificate file: %s/shop.pem holds a private key (block 2)"},
		},
		"key file without a key": {
			files: map[string][]byte{"shop.pem": goodCert, "shop-key.pem": goodCert},
			cert:  "shop.pem", key: "shop-key.pem",
			want: []string{"%s:7:21: Invalid PEM: %s/shop-key.pem holds no PEM private key"},
		},
		"encrypted key": {
			files: map[string][]byte{"shop.pem": goodCert, "shop-key.pem": encKey},
			cert:  "shop.pem", key: "shop-key.pem",
			want: []string{"%s:7:21: Encrypted private key: %s/shop-key.pem is protected by a passphrase"},
		},
		"key readable by others": {
			files: map[string][]byte{"shop.pem": goodCert, "shop-key-loose.pem": goodKey},
			cert:  "shop.pem", key: "shop-key-loose.pem",
			want: []string{"%s:7:21: warning: Private key readable by others: %s/shop-key-loose.pem has mode 0644"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			tc.files["ca.pem"] = ca.pem
			for n, b := range tc.files {
				mode := os.FileMode(0o644)
				if strings.HasSuffix(n, "-key.pem") {
					mode = 0o600
				}
				if err := os.WriteFile(filepath.Join(dir, n), b, mode); err != nil {
					t.Fatal(err)
				}
			}
			file := writePolicy(t, dir, "edge.hcl", policyFor(tc.cert, tc.key))
			cfg, _, diags := LoadFiles(file)
			got := FormatDiagnostics(diags)
			if len(got) != len(tc.want) {
				t.Fatalf("diagnostics:\n  %s\nwant %d", strings.Join(got, "\n  "), len(tc.want))
			}
			for i, w := range tc.want {
				w = strings.ReplaceAll(strings.Replace(w, "%s", file, 1), "%s", dir)
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("diagnostic %d:\n  %s\nwant prefix\n  %s", i, got[i], w)
				}
			}
			for _, line := range got {
				for _, secret := range [][]byte{goodKey, otherKey, oldKey, futureKey} {
					body := strings.Split(string(secret), "\n")[1]
					if strings.Contains(line, body) {
						t.Errorf("a diagnostic quotes a private key: %s", line)
					}
				}
			}
			if diags.HasErrors() {
				if cfg != nil {
					t.Error("LoadFiles returned a config with errors")
				}
				return
			}
			tls := cfg.Policy.Proxies[0].Listeners[0].TLS
			c := tls.Certificates[0]
			if string(c.Cert.PEM) != string(tc.files[tc.cert]) || string(c.Key.PEM) != string(tc.files[tc.key]) || string(tls.ClientCA.PEM) != string(ca.pem) {
				t.Error("ReadFiles did not keep the files' contents")
			}
		})
	}
}

// TestReadFilesUpstream: a service's CA bundle may hold expired roots as
// long as one is valid; a bundle of only expired ones is an error; an
// upstream client certificate is checked like a listener's.
func TestReadFilesUpstream(t *testing.T) {
	ca := newTestPKI(t)
	now := time.Now()
	expired := newTestPKI(t)
	expired.cert.NotAfter = now.Add(-time.Hour)
	oldRoot, _ := expired.issue("old-root", now.Add(-2*time.Hour), now.Add(-time.Hour))
	dir := t.TempDir()
	for n, b := range map[string][]byte{"bundle.pem": append(slices.Clone(oldRoot), ca.pem...), "old.pem": oldRoot} {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file := writePolicy(t, dir, "up.hcl", `service "api" {
  tls {
    ca_file = "bundle.pem"
  }
}
service "old" {
  tls {
    ca_file   = "old.pem"
    cert_file = "missing.pem"
    key_file  = "missing-key.pem"
  }
}
`)
	_, _, diags := LoadFiles(file)
	got := FormatDiagnostics(diags)
	want := []string{
		file + `:8:17: Expired certificate: ` + dir + `/old.pem: every CA certificate has expired ("old-root" at`,
		file + `:9:17: Cannot read certificate file: ` + dir + `/missing.pem: no such file or directory.`,
		file + `:10:17: Cannot read private key file: ` + dir + `/missing-key.pem: no such file or directory.`,
	}
	if len(got) != len(want) {
		t.Fatalf("diagnostics:\n  %s", strings.Join(got, "\n  "))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("diagnostic %d:\n  %s\nwant prefix\n  %s", i, got[i], want[i])
		}
	}
}

// TestPolicyNeverPrintsKeys: the contents of PEM files print as
// "[redacted]" whatever verb prints them.
func TestPolicyNeverPrintsKeys(t *testing.T) {
	f := &PEMFile{Path: "/k.pem", PEM: []byte("-----BEGIN PRIVATE KEY-----\nSECRET\n")}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%q"} {
		for _, v := range []any{f, *f, f.PEM} {
			if s := fmt.Sprintf(verb, v); strings.Contains(s, "SECRET") || strings.Contains(s, "534543524554") {
				t.Errorf("%s printed a key: %s", verb, s)
			}
		}
	}
}
