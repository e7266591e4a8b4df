package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// TestRunNotifiesSystemdWhenReady runs the real binary as systemd runs a
// Type=notify unit: with Consul down it tells why on STATUS= and never
// READY=1; against a real Consul READY=1 comes once /readyz answers 200.
func TestRunNotifiesSystemdWhenReady(t *testing.T) {
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
	start := func(consulAddr string) (admin string, msgs <-chan string, logs *bytes.Buffer) {
		admin = freeAddr(t)
		cfg := filepath.Join(t.TempDir(), "config.hcl")
		os.WriteFile(cfg, []byte(fmt.Sprintf("consul {\n  address = %q\n}\nxds {\n  listen = %q\n}\nadmin {\n  listen = %q\n}\n", consulAddr, freeAddr(t), admin)), 0o644)
		path, msgs := notifySocket(t)
		logs = &bytes.Buffer{}
		cmd := exec.Command(bin, "run", "-config", cfg)
		// STATE_DIRECTORY: the generated admin token goes there, not into
		// the user's ~/.config.
		cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+path, "STATE_DIRECTORY="+t.TempDir())
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return admin, msgs, logs
	}

	t.Run("consul down", func(t *testing.T) {
		down := freeAddr(t) // nothing listens there
		admin, msgs, logs := start(down)
		// systemctl status and /readyz say which address fails, and why.
		seen := waitFor(t, msgs, "STATUS=waiting for the first complete Consul sync; Consul at "+down+": ", 10*time.Second)
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "Consul at "+down+": ") || !strings.Contains(string(body), "connection refused") {
			t.Errorf("/readyz with Consul down: %d %s", resp.StatusCode, body)
		}
		deadline := time.After(3 * time.Second)
		for {
			select {
			case m := <-msgs:
				seen = append(seen, m)
				if strings.Contains(m, "READY=1") {
					t.Fatalf("READY=1 with Consul down: %q\n%s", seen, logs)
				}
				continue
			case <-deadline:
			}
			break
		}
	})

	t.Run("consul up", func(t *testing.T) {
		admin, msgs, logs := start(agent.HTTPAddr())
		waitFor(t, msgs, "READY=1", 20*time.Second)
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("READY=1 sent while /readyz answers %d\n%s", resp.StatusCode, logs)
		}
		// The build is on /metrics.
		resp, err = http.Get("http://" + admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `consul_xds_bridge_build_info{go_control_plane="`) || !strings.Contains(string(body), `version="dev"} 1`) {
			t.Errorf("no build_info on /metrics:\n%s", body)
		}
	})
}
