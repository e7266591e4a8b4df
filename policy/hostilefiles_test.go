package policy

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHostileFilesNamedByPolicy: a KV document may name any path on the
// bridge's host. /dev/zero, a FIFO, a 1 GB sparse file and an oversized
// JWKS are refused at once, each with a diagnostic at the attribute that
// names it (KEY:line:col), never read.
func TestHostileFilesNamedByPolicy(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sparse := filepath.Join(dir, "sparse")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	bigJWKS := filepath.Join(dir, "big.json")
	key := `{"kty":"oct","k":"` + strings.Repeat("A", 1000) + `"},`
	if err := os.WriteFile(bigJWKS, []byte(`{"keys":[`+strings.Repeat(key, MaxJWKSFileBytes/len(key)+1)+`{"kty":"oct","k":"AA"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cert := func(path string) string {
		return inTLSListener("      certificate \"c\" {\n        cert_file = \""+path+"\"\n        key_file  = \""+path+"\"\n      }", vhost("v", `["*"]`, ""))
	}
	jwks := func(path string) string {
		return authListener("    jwt_provider \"p\" {\n      issuer = \"a\"\n      jwks_file = \""+path+"\"\n    }", "")
	}
	for name, tc := range map[string]struct {
		doc  string
		want string // the first diagnostic, formatted
	}{
		"cert_file /dev/zero":    {doc: cert("/dev/zero"), want: "xds-bridge/policy/a:6:21: Cannot read certificate file: /dev/zero: not a regular file (a character device)"},
		"cert_file FIFO":         {doc: cert(fifo), want: "xds-bridge/policy/a:6:21: Cannot read certificate file: " + fifo + ": not a regular file (a FIFO)"},
		"cert_file sparse 1 GB":  {doc: cert(sparse), want: "xds-bridge/policy/a:6:21: Cannot read certificate file: " + sparse + ": file too large: 1073741824 bytes, over the limit of 1048576"},
		"jwks_file /dev/zero":    {doc: jwks("/dev/zero"), want: "xds-bridge/policy/a:6:19: Cannot read JWKS file: /dev/zero: not a regular file"},
		"jwks_file FIFO":         {doc: jwks(fifo), want: "xds-bridge/policy/a:6:19: Cannot read JWKS file: " + fifo + ": not a regular file (a FIFO)"},
		"jwks_file sparse 1 GB":  {doc: jwks(sparse), want: "xds-bridge/policy/a:6:19: Cannot read JWKS file: " + sparse + ": file too large"},
		"jwks_file over 256 KiB": {doc: jwks(bigJWKS), want: "xds-bridge/policy/a:6:19: Cannot read JWKS file: " + bigJWKS + ": file too large"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, diags := loadDocs(true, tc.doc)
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			done := make(chan []string, 1)
			go func() { done <- FormatDiagnostics(cfg.Policy.ReadFiles(time.Now())) }()
			select {
			case lines := <-done:
				if len(lines) == 0 || !strings.HasPrefix(lines[0], tc.want) {
					t.Fatalf("diagnostics = %q\nwant the first to begin with %q", lines, tc.want)
				}
			case <-time.After(time.Second):
				t.Fatal("ReadFiles did not return within 1s")
			}
		})
	}
}
