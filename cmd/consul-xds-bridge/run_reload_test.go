package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
)

// buildBridge builds this command for the tests that run it as systemd
// would.
func buildBridge(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "consul-xds-bridge")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// policyView is what the tests read of /v1/policy.
type policyView struct {
	Sources []struct {
		Name string `json:"name"`
		Kind string `json:"kind"`
		Hash string `json:"sha256"`
	} `json:"sources"`
	SuccessfulReloads int               `json:"successful_reloads"`
	RouteSources      map[string]string `json:"route_sources"`
}

func getPolicy(t *testing.T, admin, token string) policyView {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+admin+"/v1/policy", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p policyView
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/policy: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunReloadsPolicyOnSIGHUP: `systemctl reload consul-xds-bridge`
// (ExecReload: kill -HUP $MAINPID, packaging's
// TestBridgeUnitReloadSendsSIGHUP) re-reads the policy. The real binary
// runs against a real Consul; its -config is a symbolic link to a file in
// another directory, so that editing that file is not seen by the
// bridge's own watch of the -config directories and only the SIGHUP can
// reload it. After the signal /v1/policy shows the new file's hash and the
// new route, served from it.
func TestRunReloadsPolicyOnSIGHUP(t *testing.T) {
	bin := buildBridge(t)
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	dir := t.TempDir()
	admin := freeAddr(t)
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte("reload-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	settings := fmt.Sprintf(`consul {
  address   = %q
  state_dir = %q
  wait_time = "5s"
}
xds {
  listen = %q
}
admin {
  listen     = %q
  token_file = %q
}
service "web" {
  connect_timeout = "1s"
}
`, agent.HTTPAddr(), dir, freeAddr(t), admin, tokenFile)
	newPolicy := settings + `
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "demo" {
      domains = ["*"]
      route {
        service = "web"
      }
    }
  }
}
`
	real := filepath.Join(dir, "real", "config.hcl")
	link := filepath.Join(dir, "etc", "config.hcl")
	for _, d := range []string{filepath.Dir(real), filepath.Dir(link)} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(real, []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}

	var logs syncbuffer.Buffer
	cmd := exec.Command(bin, "run", "-config", link)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitReadyz(t, admin, 20*time.Second, &logs)
	hash := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	fileHash := func(p policyView) string {
		for _, s := range p.Sources {
			if s.Kind == "file" {
				return s.Hash
			}
		}
		return ""
	}
	before := getPolicy(t, admin, "reload-token")
	if _, ok := before.RouteSources["edge.http/demo/0"]; fileHash(before) != hash(settings) || ok {
		t.Fatalf("at start /v1/policy = %+v, want the first file (sha256 %s) and no edge route", before, hash(settings))
	}

	// Rewritten in place where the bridge does not watch: without a
	// signal nothing may change (else the test could not tell a SIGHUP
	// reload from the file watch's).
	if err := os.WriteFile(real, []byte(newPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if p := getPolicy(t, admin, "reload-token"); fileHash(p) != hash(settings) || p.SuccessfulReloads != before.SuccessfulReloads {
		t.Fatalf("the policy changed without SIGHUP (the file watch saw the edit): %+v", p)
	}

	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var after policyView
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		after = getPolicy(t, admin, "reload-token")
		if fileHash(after) == hash(newPolicy) && strings.HasPrefix(after.RouteSources["edge.http/demo/0"], link+":") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SIGHUP /v1/policy = %+v, want the new file (sha256 %s) and its route edge.http/demo/0\nlogs:\n%s", after, hash(newPolicy), logs.String())
		}
	}
	if after.SuccessfulReloads != before.SuccessfulReloads+1 {
		t.Errorf("successful_reloads %d -> %d, want one reload", before.SuccessfulReloads, after.SuccessfulReloads)
	}
	if !logSays(&logs, "SIGHUP: reloading configuration", 5*time.Second) {
		t.Errorf("no SIGHUP line in the log:\n%s", logs.String())
	}
	if cmd.ProcessState != nil {
		t.Fatalf("the bridge exited on SIGHUP: %v", cmd.ProcessState)
	}
}

// logSays waits up to within for logs to hold want. A child's log reaches
// the buffer through os/exec's pipe copier, which may lag behind what its
// admin API already answers (CI once read the log a moment early).
func logSays(logs fmt.Stringer, want string, within time.Duration) bool {
	for deadline := time.Now().Add(within); !strings.Contains(logs.String(), want); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}
