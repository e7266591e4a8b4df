package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestRunStopsGracefullyOnSIGTERM runs the real binary: it becomes ready,
// and on SIGTERM stops accepting, ends its streams and exits 0 quickly.
func TestRunStopsGracefullyOnSIGTERM(t *testing.T) {
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
	admin, xdsAddr := freeAddr(t), freeAddr(t)
	cfg := filepath.Join(dir, "config.hcl")
	os.WriteFile(cfg, []byte(fmt.Sprintf("consul {\n  address = %q\n}\nxds {\n  listen = %q\n}\nadmin {\n  listen = %q\n}\n", agent.HTTPAddr(), xdsAddr, admin)), 0o644)

	var logs bytes.Buffer
	cmd := exec.Command(bin, "run", "-config", cfg)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	waitReadyz(t, admin, 20*time.Second, &logs)
	// An open xDS connection must not hold up the exit past the grace period.
	conn, err := net.Dial("tcp", xdsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

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
		_ = cmd.Process.Signal(syscall.SIGQUIT) // goroutine dump, for the failure message
		<-done
		t.Fatalf("still running 15s after SIGTERM; logs:\n%s", logs.String())
	}
	t.Logf("exited 0 in %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(logs.String(), `"message":"stopped"`) {
		t.Errorf("no clean stop logged:\n%s", logs.String())
	}
	if _, err := net.DialTimeout("tcp", xdsAddr, time.Second); err == nil {
		t.Error("xDS port still accepts connections after exit")
	}
}

// waitReadyz waits until the bridge's /readyz at admin answers 200,
// failing the test with logs after within.
func waitReadyz(t *testing.T, admin string, within time.Duration, logs fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bridge never became ready; logs:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
