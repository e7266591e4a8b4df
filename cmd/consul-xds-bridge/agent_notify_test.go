package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/modroot"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
)

// TestAgentNotifiesSystemdWhenReady runs `agent` as systemd runs its
// Type=notify unit (README: ready when its /readyz answers 200). The
// agent runs an Envoy (the stand-in) whose first config must come from
// the central bridge, which is not up yet: /readyz answers 503, systemd
// is told why on STATUS= and never READY=1. Once a real bridge serves
// the upstream address, READY=1 comes, and /readyz answers 200 then.
func TestAgentNotifiesSystemdWhenReady(t *testing.T) {
	bin := buildBridge(t)
	dir := t.TempDir()
	envoy := filepath.Join(dir, "envoy")
	build := exec.Command("go", "build", "-o", envoy, "./internal/fakeenvoy")
	build.Dir = modroot.Dir()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build fakeenvoy: %v\n%s", err, out)
	}
	consul := consultest.Start(t)
	consul.RegisterTTL(t, "web", "web-1", 1001, nil, nil)

	xdsAddr, agentAdmin, envoyAdmin := freeAddr(t), freeAddr(t), freeAddr(t)
	agentCfg := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(agentCfg, []byte(fmt.Sprintf(`node_id = "vm-1"
data_dir = %q
allow_groups = ["web"]
listen {
  socket = %q
}
upstream {
  addresses = [%q]
}
admin {
  listen = %q
}
envoy "web" {
  cluster    = "web"
  binary     = %q
  admin_port = %s
  drain_time = "1s"
  parent_shutdown_time = "2s"
  args = ["--x-fake-initial-fetch-timeout", "100ms"]
}
`, filepath.Join(dir, "data"), filepath.Join(dir, "agent.sock"), xdsAddr, agentAdmin, envoy, envoyAdmin[strings.LastIndex(envoyAdmin, ":")+1:])), 0o600); err != nil {
		t.Fatal(err)
	}
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + agentAdmin + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	path, msgs := notifySocket(t)
	var logs syncbuffer.Buffer
	ag := exec.Command(bin, "agent", "-config", agentCfg)
	ag.Env = append(os.Environ(), "NOTIFY_SOCKET="+path)
	ag.Stdout, ag.Stderr = &logs, &logs
	if err := ag.Start(); err != nil {
		t.Fatal(err)
	}
	// SIGTERM lets the agent drain and stop its Envoy, which shares its
	// output: killed, the agent would leave the Envoy holding it.
	ag.WaitDelay = 5 * time.Second
	t.Cleanup(func() {
		_ = ag.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = ag.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = ag.Process.Kill()
			<-done
		}
	})

	// The central bridge is down: /readyz says 503 (its Envoy is LIVE
	// but has no config to ACK), systemd hears why on STATUS=, and
	// READY=1 never comes, from the start and over several of the
	// notifier's polls.
	var seen []string
	drain := func() {
		for {
			select {
			case m := <-msgs:
				seen = append(seen, m)
			default:
				return
			}
		}
	}
	noReady := func(code int, body string) {
		t.Helper()
		drain()
		for _, m := range seen {
			if strings.Contains(m, "READY=1") {
				t.Fatalf("READY=1 sent while /readyz answers %d %s\nnotify: %q\nagent:\n%s", code, body, seen, logs.String())
			}
		}
	}
	var status struct {
		Status string `json:"status"`
		Envoys []struct {
			Live bool `json:"live"`
		} `json:"envoys"`
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, body := readyz()
		if code == http.StatusOK {
			t.Fatalf("/readyz answers 200 with the central bridge down: %s", body)
		}
		if code == http.StatusServiceUnavailable {
			noReady(code, body)
			if json.Unmarshal([]byte(body), &status) == nil && len(status.Envoys) == 1 && status.Envoys[0].Live {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent's Envoy never went LIVE: /readyz %d %s\n%s", code, body, logs.String())
		}
	}
	for until := time.Now().Add(2 * time.Second); time.Now().Before(until); time.Sleep(200 * time.Millisecond) {
		code, body := readyz()
		if code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz with the central bridge down: %d %s", code, body)
		}
		noReady(code, body)
	}
	if _, body := readyz(); json.Unmarshal([]byte(body), &status) != nil || !slices.Contains(seen, "STATUS="+status.Status) {
		t.Errorf("systemd was not told what /readyz says (%q): %q", status.Status, seen)
	}

	// The central bridge comes up where the agent dials.
	bridgeCfg := filepath.Join(dir, "bridge.hcl")
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte("notify-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bridgeCfg, []byte(fmt.Sprintf("consul {\n  address = %q\n  state_dir = %q\n}\nxds {\n  listen = %q\n}\nadmin {\n  listen = %q\n  token_file = %q\n}\n",
		consul.HTTPAddr(), dir, xdsAddr, freeAddr(t), tokenFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	var bridgeLogs syncbuffer.Buffer
	br := exec.Command(bin, "run", "-config", bridgeCfg)
	br.Stdout, br.Stderr = &bridgeLogs, &bridgeLogs
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	br.WaitDelay = 5 * time.Second
	t.Cleanup(func() { _ = br.Process.Kill(); _ = br.Wait() })

	waitFor(t, msgs, "READY=1", 30*time.Second)
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("READY=1 sent while /readyz answers %d %s\nagent:\n%s", code, body, logs.String())
	}
}
