package main

import (
	"bytes"
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

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/modroot"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
)

// TestAgentEnvoySignals runs the real binary with an envoy block (the
// Envoy stand-in, internal/fakeenvoy): SIGHUP with a config that has
// errors changes nothing, nor does one that changes another setting too;
// SIGHUP with a changed block hot-restarts
// Envoy to epoch 1; SIGTERM drains Envoy before the agent exits.
func TestAgentEnvoySignals(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin, envoy := filepath.Join(dir, "consul-xds-bridge"), filepath.Join(dir, "envoy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	build := exec.Command("go", "build", "-o", envoy, "./internal/fakeenvoy")
	build.Dir = modroot.Dir()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build fakeenvoy: %v\n%s", err, out)
	}
	admin, envoyAdmin := freeAddr(t), freeAddr(t)
	port := envoyAdmin[strings.LastIndex(envoyAdmin, ":")+1:]
	record := filepath.Join(dir, "record.jsonl")
	cfgFile := filepath.Join(dir, "agent.hcl")
	write := func(concurrency int, extra string) {
		src := fmt.Sprintf(`node_id = "vm-1"
data_dir = %q
allow_groups = ["web"]
listen {
  socket = %q
}
upstream {
  addresses = ["127.0.0.1:1"]
}
admin {
  listen = %q
}
envoy "web" {
  cluster     = "web"
  binary      = %q
  admin_port  = %s
  concurrency = %d
  drain_time  = "1s"
  parent_shutdown_time = "2s"
  args = ["--x-fake-record", %q, "--x-fake-initial-fetch-timeout", "100ms"]
}
%s`, filepath.Join(dir, "data"), filepath.Join(dir, "agent.sock"), admin, envoy, port, concurrency, record, extra)
		if err := os.WriteFile(cfgFile, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(1, "")
	var logs syncbuffer.Buffer
	cmd := exec.Command(bin, "agent", "-config", cfgFile)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	epoch := func() (int, bool) {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return -1, false
		}
		defer resp.Body.Close()
		var body struct {
			Envoys []struct {
				Epoch int  `json:"epoch"`
				Live  bool `json:"live"`
				PID   int  `json:"pid"`
			} `json:"envoys"`
		}
		if json.NewDecoder(resp.Body).Decode(&body) != nil || len(body.Envoys) != 1 {
			return -1, false
		}
		return body.Envoys[0].Epoch, body.Envoys[0].Live && body.Envoys[0].PID != 0
	}
	waitEpoch := func(want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			if e, live := epoch(); e == want && live {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("Envoy epoch %d never LIVE; logs:\n%s", want, logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitEpoch(0)

	write(2, "bogus = true\n") // an error: refused, Envoy untouched
	_ = cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(1500 * time.Millisecond)
	if e, _ := epoch(); e != 0 || !strings.Contains(logs.String(), "SIGHUP: the configuration has errors; Envoys unchanged") {
		t.Fatalf("after SIGHUP with a bad file: epoch %d; logs:\n%s", e, logs.String())
	}
	// Another setting changed with the block: the agent runs with the
	// one it started with, against which the block was not checked, so
	// nothing changes until a restart (it used to start an Envoy the
	// running agent then refused).
	write(2, `allow_node_ids = ["vm-*"]`+"\n")
	_ = cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(1500 * time.Millisecond)
	if e, _ := epoch(); e != 0 || !strings.Contains(logs.String(), "SIGHUP: settings other than the envoy blocks changed") || !strings.Contains(logs.String(), "AllowNodeIDs") {
		t.Fatalf("after SIGHUP with allow_node_ids changed: epoch %d; logs:\n%s", e, logs.String())
	}
	write(2, "")
	_ = cmd.Process.Signal(syscall.SIGHUP)
	waitEpoch(1)

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent exited with %v; logs:\n%s", err, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("agent did not stop; logs:\n%s", logs.String())
	}
	rec, _ := os.ReadFile(record)
	var drain, quit int64
	for _, line := range bytes.Split(bytes.TrimSpace(rec), []byte("\n")) {
		var e struct {
			Event    string `json:"event"`
			Epoch    int    `json:"epoch"`
			T        int64  `json:"t"`
			Graceful bool   `json:"graceful"`
		}
		_ = json.Unmarshal(line, &e)
		switch {
		case e.Event == "drain_listeners" && e.Epoch == 1 && e.Graceful:
			drain = e.T
		case e.Event == "quitquitquit" && e.Epoch == 1:
			quit = e.T
		}
	}
	if drain == 0 || quit-drain < 950 {
		t.Fatalf("on SIGTERM: drain at %d, quit at %d: want a graceful drain, then quit after drain_time; record:\n%s", drain, quit, rec)
	}
}
