package bridge_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/procstat"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// Hostile admin tests run the bridge as a child process (this test
// binary, re-executed into TestBridgeProcess) so that a regression that
// lets a request eat memory kills the child, not the test: the parent
// samples the child's VmRSS every 10 ms and kills it above a cap.

const (
	envBridgeConfig = "BRIDGE_PROCESS_CONFIG"
	envBridgeAddrs  = "BRIDGE_PROCESS_ADDRS"
)

// TestBridgeProcess is the child: a bridge run from the config file the
// parent names, announcing its addresses in a file. It skips otherwise.
func TestBridgeProcess(t *testing.T) {
	file := os.Getenv(envBridgeConfig)
	if file == "" {
		t.Skip("the child process of startBridgeProcess")
	}
	cfg, _, diags := policy.LoadFiles(file)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	d := bridge.New(bridge.Config{ConfigFiles: []string{file}, Settings: cfg.Settings, Policy: cfg.Policy,
		Logger: zerolog.New(os.Stderr).Level(zerolog.InfoLevel)})
	go func() {
		<-d.Started()
		addrs := d.XDSAddr().String() + "\n" + d.AdminAddr().String() + "\n" + d.AdminTokenFile() + "\n"
		tmp := os.Getenv(envBridgeAddrs) + ".tmp"
		_ = os.WriteFile(tmp, []byte(addrs), 0o600)
		_ = os.Rename(tmp, os.Getenv(envBridgeAddrs))
	}()
	if err := d.Run(ctx); err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}

// bridgeProcess is a bridge running as a child process.
type bridgeProcess struct {
	cmd          *exec.Cmd
	xds, admin   string
	token        string
	log          string
	maxRSS       atomic.Int64 // kB, sampled
	killedForRSS atomic.Bool
	sampling     sync.WaitGroup
}

// startBridgeProcess runs a bridge on agent with policy (HCL, after the
// settings) and a fresh state directory (its admin token is generated
// there), killing it if its RSS passes capKB.
func startBridgeProcess(t *testing.T, agent *consultest.Agent, pol string, capKB int64) *bridgeProcess {
	t.Helper()
	dir := t.TempDir()
	config := filepath.Join(dir, "config.hcl")
	src := fmt.Sprintf(`consul {
  address   = %q
  state_dir = %q
  wait_time = "5s"
}
xds {
  listen = "127.0.0.1:0"
}
admin {
  listen = "127.0.0.1:0"
}
`, agent.HTTPAddr(), dir) + pol
	if err := os.WriteFile(config, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	addrs := filepath.Join(dir, "addrs")
	b := &bridgeProcess{log: filepath.Join(dir, "bridge.log")}
	logf, err := os.Create(b.log)
	if err != nil {
		t.Fatal(err)
	}
	b.cmd = exec.Command(os.Args[0], "-test.run=^TestBridgeProcess$", "-test.v")
	b.cmd.Env = append(os.Environ(), envBridgeConfig+"="+config, envBridgeAddrs+"="+addrs, "GOMAXPROCS=2")
	b.cmd.Stdout, b.cmd.Stderr = logf, logf
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = b.cmd.Wait(); logf.Close(); close(exited) }()
	b.sampling.Add(1)
	go b.sample(capKB, exited)
	t.Cleanup(func() {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-exited
		}
		b.sampling.Wait()
		if t.Failed() {
			out, _ := os.ReadFile(b.log)
			t.Logf("bridge process log (last 4 KiB):\n%s", tail(out, 4096))
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if got, err := os.ReadFile(addrs); err == nil {
			lines := strings.Split(strings.TrimSpace(string(got)), "\n")
			b.xds, b.admin = lines[0], lines[1]
			tok, err := os.ReadFile(lines[2])
			if err != nil {
				t.Fatal(err)
			}
			b.token = strings.TrimSpace(string(tok))
			break
		}
		select {
		case <-exited:
			out, _ := os.ReadFile(b.log)
			t.Fatalf("bridge process exited at start:\n%s", tail(out, 4096))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("bridge process did not start within 20s")
		}
	}
	// Ready: its first complete Consul sync is served (a proxy may get
	// endpoints before that, and /v1/plan answers 503 until then).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + b.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridge process not ready within 20s: %v", err)
		}
	}
	return b
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// sample records the child's peak RSS and kills it above capKB.
func (b *bridgeProcess) sample(capKB int64, exited <-chan struct{}) {
	defer b.sampling.Done()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			return
		case <-tick.C:
		}
		kb := b.rss()
		if kb > b.maxRSS.Load() {
			b.maxRSS.Store(kb)
		}
		if kb > capKB {
			b.killedForRSS.Store(true)
			_ = b.cmd.Process.Kill()
			return
		}
	}
}

// rss is the child's current VmRSS in kB (0 once it is gone).
func (b *bridgeProcess) rss() int64 {
	n, _ := procstat.RSS(b.cmd.Process.Pid)
	return n >> 10
}

// plan posts doc to /v1/plan as the console does (JSON, with the token)
// and returns the status and body; errors (a killed child) are status 0.
func (b *bridgeProcess) plan(name, doc string, timeout time.Duration) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+b.admin+"/v1/plan", strings.NewReader(planJSON(name, doc)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.String()
}

// flipper flips web-1's TTL check and measures how long the flip takes
// to reach a connected proxy.
type flipper struct {
	agent   *consultest.Agent
	c       *adsclient.Client
	healthy bool
}

func newFlipper(t *testing.T, agent *consultest.Agent, xdsAddr string) *flipper {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: xdsAddr, NodeID: "watcher-1", Cluster: "watchers"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Wait(ctx, func(s adsclient.State) bool { return summary(s.Endpoints("web")) == ep(1001, "HEALTHY") }); err != nil {
		t.Fatalf("the proxy never got web's endpoint: %v", err)
	}
	return &flipper{agent: agent, c: c, healthy: true}
}

// flip flips the check and returns how long the proxy took to see it
// (failing the test past 1s, or never).
func (f *flipper) flip(t *testing.T, during string) time.Duration {
	t.Helper()
	state, want := "critical", ep(1001, "UNHEALTHY")
	if !f.healthy {
		state, want = "passing", ep(1001, "HEALTHY")
	}
	f.healthy = !f.healthy
	start := time.Now()
	f.agent.SetTTL(t, "service:web-1", state)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.c.Wait(ctx, func(s adsclient.State) bool { return summary(s.Endpoints("web")) == want }); err != nil {
		t.Errorf("%s: the health flip to %s never reached the proxy: %v", during, state, err)
		return 0
	}
	took := time.Since(start)
	if took > time.Second {
		t.Errorf("%s: the health flip to %s took %v, want within 1s", during, state, took)
	} else {
		t.Logf("%s: health flip to %s in %v", during, state, took)
	}
	return took
}
