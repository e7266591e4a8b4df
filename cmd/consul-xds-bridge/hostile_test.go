package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// lockedBuffer collects a subprocess's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestHostileFilesAndSecretsInTheRealBinary runs the real binary against
// a real Consul, as an attacker who can write the KV policy prefix would
// meet it (issue 36):
//   - its state file (state_dir/kv-policy.json) is a FIFO and a KV document
//     is broken at start, so the state file is looked for: the bridge says
//     why it is not ready instead of waiting for a writer forever;
//   - a private key pasted into a cert_file, a service name (KV) or an
//     instance's address (catalog) never appears on /v1/policy or in the
//     log;
//   - a KV document naming a FIFO as cert_file is rejected;
//   - SIGTERM stops it at once, FIFOs or not.
func TestHostileFilesAndSecretsInTheRealBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	dir := t.TempDir()
	bin := filepath.Join(dir, "consul-xds-bridge")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fifo, filepath.Join(state, "kv-policy.json")); err != nil {
		t.Fatal(err)
	}
	const prefix = "xds-bridge/policy/"
	put := func(key, val string) {
		t.Helper()
		if _, err := agent.Client().KV().Put(&api.KVPair{Key: prefix + key, Value: []byte(val)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("base.hcl", "export_all_services = \n") // broken at start
	// insecure_serve_keys: the key file below must be read (and refused
	// as a FIFO), not refused first for the plaintext transport.
	admin, xdsAddr := freeAddr(t), freeAddr(t)
	cfg := filepath.Join(dir, "config.hcl")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("consul {\n  address = %q\n  kv_prefix = %q\n  state_dir = %q\n}\nxds {\n  listen = %q\n  insecure_serve_keys = true\n}\nadmin {\n  listen = %q\n}\n",
		agent.HTTPAddr(), prefix, state, xdsAddr, admin)), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	cmd := exec.Command(bin, "run", "-config", cfg)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	policyPage := func() string {
		// The admin token the bridge generates in its state directory.
		tok, _ := os.ReadFile(filepath.Join(state, "admin-token"))
		req, _ := http.NewRequest(http.MethodGet, "http://"+admin+"/v1/policy", nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// waitPolicy waits for /v1/policy to contain each of want; an error,
	// not fatal, so that SIGTERM is tried whatever happened before.
	waitPolicy := func(what string, want ...string) bool {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			page := policyPage()
			ok := page != ""
			for _, w := range want {
				ok = ok && strings.Contains(page, w)
			}
			if ok {
				return true
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: /v1/policy never showed %q; it shows:\n%s\nlogs:\n%s", what, want, page, logs.String())
				return false
			}
		}
	}

	if waitPolicy("FIFO state file at start", "rejected at start") {
		if !logSays(logs, "kv-policy.json: not a regular file (a FIFO)", 5*time.Second) {
			t.Errorf("the log does not say the state file was ignored:\n%s", logs.String())
		}
		put("base.hcl", "export_all_services = true\n")
		waitPolicy("fixed document", `"successful_reloads": 1`)

		rk, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		key := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)}))
		lines := strings.Split(strings.TrimSpace(key), "\n")
		body := strings.Join(lines[1:len(lines)-1], "")
		put("pasted.hcl", "proxy \"edge\" {\n  listener \"https\" {\n    port = 8443\n    tls {\n      certificate \"c\" {\n        cert_file = \""+
			strings.ReplaceAll(key, "\n", `\n`)+"\"\n        key_file  = \"/nonexistent/key.pem\"\n      }\n    }\n    virtual_host \"v\" {\n      domains = [\"*\"]\n      route {\n        service = \"web\"\n      }\n    }\n  }\n}\n")
		waitPolicy("key pasted into cert_file", `"failed_reloads": 2`, "pasted.hcl:6:21")
		put("pasted.hcl", "proxy \"edge\" {\n  listener \"http\" {\n    port = 8080\n    virtual_host \"v\" {\n      domains = [\"*\"]\n      route {\n        service = \""+body+"\"\n      }\n    }\n  }\n}\n")
		waitPolicy("key pasted into a service name", "pasted.hcl:7")
		// From the catalog: an instance whose address is the key reaches
		// the build's warnings (/v1/policy "warnings" and the log).
		if err := agent.Client().Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-key", Name: "web", Address: body, Port: 1002}); err != nil {
			t.Fatal(err)
		}
		waitPolicy("key pasted as an instance address", `"warnings"`, "web-key", "[REDACTED]")
		time.Sleep(300 * time.Millisecond) // whatever the build logs about it
		for where, text := range map[string]string{"/v1/policy": policyPage(), "the log": logs.String()} {
			for _, l := range lines[1 : len(lines)-1] {
				for i := 0; i+16 <= len(l); i += 16 {
					if strings.Contains(text, l[i:i+16]) {
						t.Fatalf("%q of the pasted private key is in %s:\n%s", l[i:i+16], where, text)
					}
				}
			}
		}
		if !strings.Contains(policyPage(), "[REDACTED]") {
			t.Errorf("/v1/policy shows no [REDACTED]: was the key pasted at all?\n%s", policyPage())
		}

		put("pasted.hcl", "proxy \"edge\" {\n  listener \"https\" {\n    port = 8443\n    tls {\n      certificate \"c\" {\n        cert_file = \""+fifo+
			"\"\n        key_file  = \""+fifo+"\"\n      }\n    }\n    virtual_host \"v\" {\n      domains = [\"*\"]\n      route {\n        service = \"web\"\n      }\n    }\n  }\n}\n")
		waitPolicy("FIFO as cert_file", fifo+": not a regular file (a FIFO)")
	}

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v; logs:\n%s", err, logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15s after SIGTERM; logs:\n%s", logs.String())
	}
	t.Logf("exited 0 in %v after SIGTERM", time.Since(start).Round(time.Millisecond))
}
