package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/testpki"
)

// TestValidateAndRunRefuseKeysOverPlaintext: validate rejects a central
// mesh served over plaintext xDS with file:line:col and the setting to
// change, and run refuses to start with the same message; with mTLS and
// authorize_nodes validate accepts it.
func TestValidateAndRunRefuseKeysOverPlaintext(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "central.hcl")
	src := "xds {\n  listen = \"0.0.0.0:18000\"\n}\nmesh {\n  mode = \"central\"\n}\n"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"validate", file}, {"run", "-config", file}} {
		var out, errOut bytes.Buffer
		code := realMain(args, &out, &errOut)
		msg := errOut.String()
		if code != 1 || !strings.Contains(msg, file+":5:") || !strings.Contains(msg, "authorize_nodes") || !strings.Contains(msg, "insecure_serve_keys") {
			t.Errorf("%s: exit %d, want 1 with %s:5: naming authorize_nodes and insecure_serve_keys\n%s%s", args[0], code, file, out.String(), msg)
		}
	}
	// validate reads the TLS files as run does: real ones.
	ca := testpki.New(t)
	cert, key := ca.Issue(testpki.Leaf{DNS: []string{"bridge"}})
	for name, b := range map[string][]byte{"s.pem": cert, "s-key.pem": key, "ca.pem": ca.PEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mtls := "xds {\n  listen = \"0.0.0.0:18000\"\n  authorize_nodes = true\n  tls {\n    cert_file = \"" + filepath.Join(dir, "s.pem") + "\"\n    key_file = \"" + filepath.Join(dir, "s-key.pem") + "\"\n    client_ca_file = \"" + filepath.Join(dir, "ca.pem") + "\"\n  }\n}\nmesh {\n  mode = \"central\"\n}\n"
	if err := os.WriteFile(file, []byte(mtls), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := realMain([]string{"validate", file}, &out, &errOut); code != 0 {
		t.Errorf("validate with mTLS and authorize_nodes: exit %d\n%s", code, errOut.String())
	}
}
