package policy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"
)

func testKeys(t *testing.T) map[string]string {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(rk)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := x509.MarshalECPrivateKey(ek)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"PKCS #8": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8})),
		"PKCS #1": string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)})),
		"EC":      string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ec})),
		"encrypted": string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Headers: map[string]string{
			"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,0123456789ABCDEF0123456789ABCDEF"}, Bytes: x509.MarshalPKCS1PrivateKey(rk)})),
	}
}

// leaks reports a line of key's base64 body found in out.
func leaks(key, out string) string {
	for _, line := range strings.Split(key, "\n") {
		if len(line) >= 16 && !strings.HasPrefix(line, "-----") && !strings.Contains(line, ":") {
			for i := 0; i+16 <= len(line); i += 8 {
				if strings.Contains(out, line[i:i+16]) {
					return line[i : i+16]
				}
			}
		}
	}
	return ""
}

func TestRedactSecrets(t *testing.T) {
	for kind, key := range testKeys(t) {
		body := strings.Join(strings.Split(strings.TrimSpace(key), "\n")[1:], "\n")
		body = body[:strings.LastIndex(body, "\n")]
		jsonKey, _ := json.Marshal(key)
		for form, s := range map[string]string{
			"as is":          "cannot read " + key + " today",
			"quoted":         fmt.Sprintf("file %q: no such file", key),
			"JSON":           `{"level":"error","diagnostics":[` + string(jsonKey) + `],"msg":"x"}`,
			"double escaped": strings.ReplaceAll(fmt.Sprintf("%q", fmt.Sprintf("%q", key)), `\\`, `\\`),
			"cut off":        "x: " + key[:len(key)/2],
			"body only":      "domain \"" + body + "\" is not valid",
			"one line":       "name " + strings.ReplaceAll(body, "\n", "") + " is not valid",
		} {
			t.Run(kind+"/"+form, func(t *testing.T) {
				got := RedactSecrets(s)
				if l := leaks(key, got); l != "" {
					t.Fatalf("%q of the key is still in %q", l, got)
				}
				if !strings.Contains(got, Redacted) {
					t.Fatalf("no %s in %q", Redacted, got)
				}
				var buf bytes.Buffer
				NewRedactingWriter(&buf).Write([]byte(s))
				if buf.String() != got {
					t.Fatalf("writer wrote %q, RedactSecrets %q", buf.String(), got)
				}
			})
		}
	}
	for name, s := range map[string]string{
		"sha256":      `{"name":"a.hcl","sha256":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}`,
		"long path":   "/tmp/TestHostileFilesNamedByPolicy2024768492/001/SomeDirectory/Another1/sparse.pem: file too large",
		"long path 2": "/var/lib/consul-xds-bridge/StateDirectoryWithAVeryLongName1234567890/kv-policy.json",
		"message":     "xds-bridge/policy/a:6:21: Cannot read certificate file: /dev/zero: not a regular file (a character device); name a regular file.",
		"route":       "edge.http/shop/0",
	} {
		t.Run("kept/"+name, func(t *testing.T) {
			if got := RedactSecrets(s); got != s {
				t.Fatalf("changed %q to %q", s, got)
			}
		})
	}
}

// TestPastedKeyNeverInDiagnostics: a private key pasted into the wrong
// field of a KV document (a path, a domain, a service name) is not in
// any diagnostic the bridge shows or logs.
func TestPastedKeyNeverInDiagnostics(t *testing.T) {
	key := testKeys(t)["PKCS #8"]
	hclKey := strings.ReplaceAll(key, "\n", `\n`)
	for name, doc := range map[string]string{
		"cert_file": inTLSListener("      certificate \"c\" {\n        cert_file = \""+hclKey+"\"\n        key_file  = \"/nonexistent/key.pem\"\n      }", vhost("v", `["*"]`, "")),
		"domains":   inTLSListener("      certificate \"c\" {\n        cert_file = \"/nonexistent/c.pem\"\n        key_file  = \"/nonexistent/key.pem\"\n      }", vhost("v", `["`+hclKey+`"]`, "")),
		"heredoc":   "service \"web\" {\n  connect_timeout = <<EOT\n" + key + "EOT\n}\n",
		"path":      "proxy \"edge\" {\n  listener \"http\" {\n    port = 8080\n    virtual_host \"v\" {\n      domains = [\"*\"]\n      route {\n        match {\n          path_regex = \"" + hclKey + "\"\n        }\n        service = \"web\"\n      }\n    }\n  }\n}\n",
	} {
		t.Run(name, func(t *testing.T) {
			cfg, diags := loadDocs(true, doc)
			if cfg != nil && !diags.HasErrors() {
				diags = append(diags, cfg.Policy.ReadFiles(time.Now())...)
			}
			if !diags.HasErrors() {
				t.Fatal("the document was accepted")
			}
			out := strings.Join(FormatDiagnostics(diags), "\n")
			if l := leaks(key, out); l != "" {
				t.Fatalf("%q of the key is in the diagnostics:\n%s", l, out)
			}
			t.Log(out)
		})
	}
}

// TestRedactPEMBodyWithManySlashes: the continuation lines of a key's
// body, whatever their slashes, are redacted (a random EC key's were once
// let through as a file path: CI).
func TestRedactPEMBodyWithManySlashes(t *testing.T) {
	body := "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg1N5p4bQixbVyz5wj\n" +
		"AwEHoUQDQgAE1N5p/4bQixbVyz5wjm9+GkX/+gzNUSJZsx/59+cHuQe8OID/whNf\n" +
		"9gBET/qz2Jl3RScTGjIE/UE9EbA2ebY+/w=="
	for _, s := range []string{"domain \"" + body + "\" is not valid", "x " + body[strings.Index(body, "\n")+1:]} {
		got := RedactSecrets(s)
		if strings.Contains(got, "AwEHoUQDQgAE1N5p") || strings.Contains(got, "9gBET/qz2Jl3RScT") {
			t.Errorf("key lines still in %q", got)
		}
	}
}
