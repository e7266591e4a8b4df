package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Target is a running xDS server under test.
type Target struct {
	// Name is "bridge", "baseline" or "peer".
	Name    string
	XDSAddr string
	PID     int
	// MetricsURL serves Prometheus text ("" for peer).
	MetricsURL string
	// ConsulMetric counts the Consul HTTP requests the server made.
	ConsulMetric string
	// Cluster is the node.cluster the fleet announces.
	Cluster string
	// NodeID names simulated Envoy k.
	NodeID func(k int) string
	// AdminToken is the bearer token the ProfileURL's admin API wants
	// ("" for none).
	AdminToken string
	// ProfileURL serves a CPU profile (net/http/pprof; "" when the
	// server has none).
	ProfileURL string
	stop       func()
	log        string
}

// Stop ends the server.
func (t *Target) Stop() {
	if t.stop != nil {
		t.stop()
	}
}

// Memory is what a server reports of its memory; zero where it reports
// nothing.
type Memory struct {
	Heap       int64 // Go heap in use
	Stacks     int64 // goroutine stacks in use (the bridge's metrics)
	Goroutines int64
	// HeapIdle is heap memory in no span (free to reuse), HeapReleased
	// the part of it returned to the OS: HeapIdle-HeapReleased is what
	// the RSS still holds for nothing.
	HeapIdle, HeapReleased int64
	// IdleReleases counts the bridge's idle collections that returned
	// memory to the OS (after a storm of streams).
	IdleReleases int64
}

func (m Memory) plus(o Memory) Memory {
	return Memory{Heap: m.Heap + o.Heap, Stacks: m.Stacks + o.Stacks, Goroutines: m.Goroutines + o.Goroutines,
		HeapIdle: m.HeapIdle + o.HeapIdle, HeapReleased: m.HeapReleased + o.HeapReleased, IdleReleases: m.IdleReleases + o.IdleReleases}
}

// Memory returns the server's memory figures from one scrape of its
// metrics (Consul's own metrics for the peer, which reports its heap only).
func (t *Target) Memory(c *Consul) Memory {
	if t.MetricsURL != "" {
		m, err := ScrapeMetrics(t.MetricsURL)
		if err != nil {
			return Memory{}
		}
		return Memory{Heap: int64(m["go_memstats_heap_inuse_bytes"]), Stacks: int64(m["go_memstats_stack_inuse_bytes"]), Goroutines: int64(m["go_goroutines"]),
			HeapIdle: int64(m["go_memstats_heap_idle_bytes"]), HeapReleased: int64(m["go_memstats_heap_released_bytes"]),
			IdleReleases: int64(m["consul_xds_bridge_idle_memory_releases_total"])}
	}
	if t.Name == "peer" && c != nil {
		mi, err := c.Client.Agent().Metrics()
		if err != nil {
			return Memory{}
		}
		for _, g := range mi.Gauges {
			if g.Name == "consul.runtime.alloc_bytes" {
				return Memory{Heap: int64(g.Value)}
			}
		}
	}
	return Memory{}
}

// fanoutTotals is the bridge's push_fanout_seconds histogram's sum and
// count, over every server of the run that exposes it.
type fanoutTotals struct{ sum, count float64 }

func (r *run) fanout() fanoutTotals {
	var f fanoutTotals
	for _, t := range r.targets() {
		if t.MetricsURL == "" {
			continue
		}
		if m, err := ScrapeMetrics(t.MetricsURL); err == nil {
			f.sum += m["consul_xds_bridge_push_fanout_seconds_sum"]
			f.count += m["consul_xds_bridge_push_fanout_seconds_count"]
		}
	}
	return f
}

// memory sums the memory figures of every server of the run.
func (r *run) memory() Memory {
	var m Memory
	for _, t := range r.targets() {
		m = m.plus(t.Memory(r.consul))
	}
	return m
}

// ConsulRequests is the number of Consul HTTP requests the server made so
// far, -1 if unknown.
func (t *Target) ConsulRequests() float64 {
	if t.MetricsURL == "" || t.ConsulMetric == "" {
		return -1
	}
	m, err := ScrapeMetrics(t.MetricsURL)
	if err != nil {
		return -1
	}
	return m[t.ConsulMetric]
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Policy is the routing policy every server serves: one proxy group
// "bench" with an HTTP listener routing to the first `routes` services,
// and either every catalog service as a cluster (exportAll) or only those.
func Policy(exportAll bool, routes int) string {
	var b strings.Builder
	if exportAll {
		b.WriteString("export_all_services = true\n\n")
	}
	for i := 0; i < routes; i++ {
		fmt.Fprintf(&b, "service %q {\n  connect_timeout = \"1s\"\n}\n", ServiceName(i))
	}
	b.WriteString("proxy \"bench\" {\n  listener \"http\" {\n    port = 8080\n    virtual_host \"all\" {\n      domains = [\"*\"]\n")
	for i := 0; i < routes; i++ {
		fmt.Fprintf(&b, "      route {\n        match {\n          path_prefix = \"/%s/\"\n        }\n        service = %q\n      }\n", ServiceName(i), ServiceName(i))
	}
	b.WriteString("    }\n  }\n}\n")
	return b.String()
}

func extraLines(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// StartBridge runs the bridge binary as a subprocess pinned to cpus.
// xdsLines are extra settings of its xds block (e.g. debounce_adaptive =
// false for the fixed-window comparison).
func StartBridge(ctx context.Context, bin, dir, consulAddr, policy, cpus string, gomaxprocs int, logLevel string, xdsLines ...string) (*Target, error) {
	if logLevel == "" {
		logLevel = "warn"
	}
	xdsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	adminAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	// The admin API wants a token (profiles included): the harness
	// writes one the bridge reads instead of generating its own.
	token := rand.Text()
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`consul {
  address   = %q
  stale     = true
  wait_time = "60s"
}
xds {
  listen = %q
%s}
admin {
  listen     = %q
  pprof      = true
  token_file = %q
}
log {
  level  = %q
  format = "json"
}

%s`, consulAddr, xdsAddr, extraLines(xdsLines), adminAddr, tokenFile, logLevel, policy)
	path := filepath.Join(dir, "bridge.hcl")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	t := &Target{
		Name: "bridge", XDSAddr: xdsAddr, Cluster: "bench",
		MetricsURL:   "http://" + adminAddr + "/metrics",
		ProfileURL:   "http://" + adminAddr + "/debug/pprof/profile",
		AdminToken:   token,
		ConsulMetric: "consul_xds_bridge_consul_requests_total",
		NodeID:       func(k int) string { return fmt.Sprintf("envoy-%d", k) },
		log:          filepath.Join(dir, "bridge.log"),
	}
	if err := t.startProc(ctx, cpus, gomaxprocs, "http://"+adminAddr+"/readyz", bin, "run", "-config", path); err != nil {
		return nil, err
	}
	return t, nil
}

// StartBaseline runs `self baseline-server` as a subprocess pinned to cpus.
func StartBaseline(ctx context.Context, self, dir, consulAddr, policy, cpus string, gomaxprocs int) (*Target, error) {
	xdsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "baseline-policy.hcl")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		return nil, err
	}
	t := &Target{
		Name: "baseline", XDSAddr: xdsAddr, Cluster: "bench",
		MetricsURL:   "http://" + httpAddr + "/metrics",
		ConsulMetric: "baseline_consul_requests_total",
		NodeID:       func(k int) string { return fmt.Sprintf("envoy-%d", k) },
		log:          filepath.Join(dir, "baseline.log"),
	}
	if err := t.startProc(ctx, cpus, gomaxprocs, "http://"+httpAddr+"/readyz", self, "baseline-server",
		"-consul", consulAddr, "-policy", path, "-xds", xdsAddr, "-http", httpAddr); err != nil {
		return nil, err
	}
	return t, nil
}

// PeerTarget is Consul's own xDS server (delta ADS on the gRPC port).
func PeerTarget(c *Consul) *Target {
	return &Target{Name: "peer", XDSAddr: c.GRPCAddr, PID: c.PID(), Cluster: "", NodeID: SidecarID}
}

func (t *Target) startProc(ctx context.Context, cpus string, gomaxprocs int, readyURL, bin string, args ...string) error {
	logf, err := os.Create(t.log)
	if err != nil {
		return err
	}
	cmd := pinned(cpus, bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = os.Environ()
	if gomaxprocs > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("GOMAXPROCS=%d", gomaxprocs))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	t.PID = cmd.Process.Pid
	t.stop = func() { stopProc(cmd, done) }
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(readyURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			b, _ := os.ReadFile(t.log)
			return fmt.Errorf("%s exited early: %s", t.Name, tail(string(b), 1500))
		case <-ctx.Done():
			t.stop()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.stop()
			return fmt.Errorf("%s not ready after 90s (log %s)", t.Name, t.log)
		}
	}
}

func stopProc(cmd *exec.Cmd, done chan struct{}) {
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Repin moves every thread of pid to cpus (taskset -a -p).
func Repin(pid int, cpus string) error {
	if cpus == "" {
		return nil
	}
	out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, fmt.Sprint(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset: %v: %s", err, out)
	}
	return nil
}
