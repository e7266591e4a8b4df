package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/modroot"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
)

func buildDemo(t *testing.T) (demo, bridge string) {
	t.Helper()
	dir := t.TempDir()
	demo, bridge = filepath.Join(dir, "demo"), filepath.Join(dir, "consul-xds-bridge")
	for bin, pkg := range map[string]string{demo: ".", bridge: filepath.Join(modroot.Dir(), "cmd", "consul-xds-bridge")} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return demo, bridge
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// demoConfig is config.hcl with the given Consul address and listeners.
func demoConfig(t *testing.T, consulAddr, xdsAddr, adminAddr string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(modroot.Dir(), "config.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(src), `address = "127.0.0.1:8500"`, fmt.Sprintf("address = %q", consulAddr), 1)
	s = strings.Replace(s, `listen = "127.0.0.1:18000"`, fmt.Sprintf("listen = %q", xdsAddr), 1)
	s = strings.Replace(s, `listen = "127.0.0.1:19100"`, fmt.Sprintf("listen = %q", adminAddr), 1)
	f := filepath.Join(t.TempDir(), "config.hcl")
	if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// startDemo runs the demo program; out collects what it prints.
func startDemo(t *testing.T, demo string, args ...string) (*exec.Cmd, *syncbuffer.Buffer) {
	t.Helper()
	var out syncbuffer.Buffer
	cmd := exec.Command(demo, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd, &out
}

// TestDemoIsSafeBesideARealAgent: `make run` on a machine whose Consul
// agent answers at the configured address never registers into it (it
// used to, with DeregisterCriticalServiceAfter=10m, and a second run took
// over the first one's services); it runs its own agent and says so; a
// second demo refuses while one runs; and a demo whose bridge cannot bind
// exits non-zero.
func TestDemoIsSafeBesideARealAgent(t *testing.T) {
	// The bridge's generated admin token goes here, not into ~/.config.
	t.Setenv("STATE_DIRECTORY", t.TempDir())
	theirs := consultest.Start(t)
	demo, bridge := buildDemo(t)
	consulBin := consultest.Binary(t)
	cfg := demoConfig(t, theirs.HTTPAddr(), freeAddr(t), freeAddr(t))

	first, out := startDemo(t, demo, "-consul-bin", consulBin, "-bridge", bridge, "-config", cfg)
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "consul-xds-bridge is running") {
		if time.Now().After(deadline) || !running(first.Process.Pid) {
			t.Fatalf("the demo did not start:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "a Consul agent answers at "+theirs.HTTPAddr()+": the demo leaves it alone") {
		t.Errorf("the demo did not say it leaves the agent it found alone:\n%s", out.String())
	}
	services, _, err := theirs.Client().Catalog().Services(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web", "api", "echo"} {
		if _, ok := services[name]; ok {
			t.Errorf("the demo registered %q into an agent it did not start: %v", name, services)
		}
	}

	// The second must be refused while the first runs: a first that has
	// died meanwhile (its bridge, say) would let the second run for good
	// and the test wait on it until the package's timeout.
	if !running(first.Process.Pid) {
		t.Fatalf("the first demo exited before the second was started:\n%s", out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, demo, "-consul-bin", consulBin, "-bridge", bridge, "-config", cfg)
	second.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	second.Cancel = func() error { return syscall.Kill(-second.Process.Pid, syscall.SIGKILL) }
	second.WaitDelay = 5 * time.Second
	if b, err := second.CombinedOutput(); ctx.Err() != nil {
		t.Fatalf("a second demo ran instead of refusing (killed after 60 s):\n%s\nthe first's output:\n%s", b, out.String())
	} else if err == nil || !strings.Contains(string(b), "another demo is running") {
		t.Errorf("a second demo: err %v, output %q; want a refusal", err, b)
	}

	// Stopped with Ctrl-C, the demo exits 0.
	if err := syscall.Kill(first.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- first.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the demo stopped with %v:\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the demo did not stop on SIGINT")
	}

	// A bridge that cannot bind its xDS port: the demo exits non-zero.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	bad := demoConfig(t, theirs.HTTPAddr(), busy.Addr().String(), freeAddr(t))
	failing, failOut := startDemo(t, demo, "-consul-bin", consulBin, "-bridge", bridge, "-config", bad)
	go func() { done <- failing.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("the demo exited 0 when its bridge could not bind:\n%s", failOut.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the demo did not exit when its bridge could not bind:\n%s", failOut.String())
	}
}

// running reports whether process pid is alive and not a zombie (a child
// that exited and was not waited for still answers kill 0).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}
