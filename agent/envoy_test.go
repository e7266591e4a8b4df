package agent_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"sigs.k8s.io/yaml"
)

// envoySetup is an agent relaying a stand-in central bridge, running one
// stand-in Envoy (block "web", node.cluster web).
type envoySetup struct {
	ag     *runningAgent
	dir    string
	record string
	cfg    agent.EnvoyConfig
}

func startEnvoyAgent(t *testing.T, adjust func(*agent.EnvoyConfig)) *envoySetup {
	t.Helper()
	bin := fakeEnvoyBinary(t)
	cen := startStandIn(t, nil, bigWorld(10, 1001))
	dir := t.TempDir()
	s := &envoySetup{dir: dir, record: filepath.Join(dir, "record.jsonl")}
	s.cfg = agent.EnvoyConfig{Name: "web", Binary: bin, NodeID: "vm-1-web", Cluster: "web", AdminPort: freePort(t),
		DrainTime: time.Second, ParentShutdownTime: 2 * time.Second, DrainStrategy: "immediate", Concurrency: 2,
		Args: []string{"--x-fake-record", s.record, "-l", "info"}}
	s.cfg.BaseID = s.cfg.AdminPort
	if adjust != nil {
		adjust(&s.cfg)
	}
	s.ag = startAgentWith(t, dir, func(c *agent.Config) {
		c.Upstreams = []string{cen.addr}
		c.Envoys = []agent.EnvoyConfig{s.cfg}
		c.EnvoyBackoffInitial, c.EnvoyBackoffMax = 100*time.Millisecond, 400*time.Millisecond
	})
	return s
}

func (s *envoySetup) waitReady(t *testing.T, epoch int) agent.EnvoyStatus {
	t.Helper()
	var st agent.EnvoyStatus
	eventually(t, 15*time.Second, fmt.Sprintf("epoch %d ready", epoch), func() bool {
		st = envoyStatus(t, s.ag)
		return st.Ready && st.Epoch == epoch
	})
	return st
}

// TestEnvoyBootstrapAndFlags: the agent writes the bootstrap the
// bootstrap command would (ADS over the agent's own socket, admin on
// 127.0.0.1, the node), starts Envoy with it and Envoy's hot restart and
// drain flags, and once Envoy is LIVE and has ACKed, /readyz is 200 and
// /v1/proxies shows its version from /server_info.
func TestEnvoyBootstrapAndFlags(t *testing.T) {
	t.Setenv("CONSUL_HTTP_TOKEN", "agent-token") // the agent's, not Envoy's
	s := startEnvoyAgent(t, nil)
	st := s.waitReady(t, 0)
	if code, body := agentReadyz(t, s.ag); code != 200 {
		t.Fatalf("/readyz %d %v with the Envoy ready", code, body)
	}
	file := filepath.Join(s.dir, "data", "envoy", "web.yaml")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var bs struct {
		Node  struct{ ID, Cluster string }
		Admin struct {
			Address struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			}
		}
		StaticResources struct {
			Clusters []struct {
				Name           string
				LoadAssignment struct {
					Endpoints []struct {
						LbEndpoints []struct {
							Endpoint struct {
								Address struct{ Pipe struct{ Path string } }
							}
						} `json:"lb_endpoints"`
					}
				} `json:"load_assignment"`
			}
		} `json:"static_resources"`
	}
	if err := yaml.Unmarshal(b, &bs); err != nil {
		t.Fatal(err)
	}
	if bs.Node.ID != "vm-1-web" || bs.Node.Cluster != "web" {
		t.Errorf("bootstrap node %+v, want vm-1-web in web", bs.Node)
	}
	if a := bs.Admin.Address.SocketAddress; a.Address != "127.0.0.1" || a.PortValue != s.cfg.AdminPort {
		t.Errorf("bootstrap admin %+v, want 127.0.0.1:%d", a, s.cfg.AdminPort)
	}
	if pipe := bs.StaticResources.Clusters[0].LoadAssignment.Endpoints[0].LbEndpoints[0].Endpoint.Address.Pipe.Path; pipe != s.ag.SocketAddr().String() {
		t.Errorf("bootstrap ADS pipe %q, want the agent's socket %q", pipe, s.ag.SocketAddr())
	}
	starts := find(readEvents(t, s.record), func(e envoyEvent) bool { return e.Event == "start" })
	want := []string{"-c", file, "--restart-epoch", "0", "--base-id", strconv.Itoa(s.cfg.BaseID), "--drain-time-s", "1",
		"--parent-shutdown-time-s", "2", "--drain-strategy", "immediate",
		"--socket-path", filepath.Join(s.dir, "data", "envoy", "web.hr"), "--socket-mode", "600",
		"--concurrency", "2", "--x-fake-record", s.record, "-l", "info"}
	if len(starts) != 1 || !slices.Equal(starts[0].Args, want) {
		t.Fatalf("Envoy started %d times with %+v, want once with %q", len(starts), starts, want)
	}
	// The hot restart socket is a file only the agent's user reaches (in
	// data_dir/envoy, 0700, itself 0600), not Envoy's default in the
	// abstract namespace, which any local user may connect to.
	socks, _ := filepath.Glob(filepath.Join(s.dir, "data", "envoy", "web.hr_*"))
	if len(socks) == 0 {
		t.Fatalf("no hot restart socket file beside the bootstrap: %v", socks)
	}
	for _, sock := range socks {
		if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
			t.Errorf("hot restart socket %s: %v %v, want a 0600 socket", sock, fi.Mode(), err)
		}
	}
	if fi, err := os.Stat(filepath.Join(s.dir, "data", "envoy")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data_dir/envoy %v %v, want 0700", fi.Mode(), err)
	}
	if len(starts[0].ConsulEnv) != 0 {
		t.Errorf("Envoy got the agent's Consul variables %q", starts[0].ConsulEnv)
	}
	if !strings.Contains(st.Version, "/1.31.2/") || st.State != "LIVE" || st.PID != starts[0].PID {
		t.Errorf("status %+v: want the version and state from /server_info and the pid", st)
	}
	var proxies []struct {
		NodeID string             `json:"node_id"`
		Envoy  *agent.EnvoyStatus `json:"envoy"`
	}
	if err := json.Unmarshal([]byte(getText(t, "http://"+s.ag.AdminAddr().String()+"/v1/proxies")), &proxies); err != nil {
		t.Fatal(err)
	}
	if len(proxies) != 1 || proxies[0].Envoy == nil || proxies[0].Envoy.Version != st.Version {
		t.Fatalf("/v1/proxies %+v: want the Envoy with its version", proxies)
	}
}

// TestEnvoyNotReadyUntilLive: an Envoy that never becomes LIVE keeps
// /readyz at 503 saying what /ready says; it is not restarted for it.
func TestEnvoyNotReadyUntilLive(t *testing.T) {
	s := startEnvoyAgent(t, func(c *agent.EnvoyConfig) { c.Args = append(c.Args, "--x-fake-never-live") })
	eventually(t, 10*time.Second, "a /ready answer", func() bool { return strings.Contains(envoyStatus(t, s.ag).Reason, "INITIALIZING") })
	for range 3 { // over several polls
		code, body := agentReadyz(t, s.ag)
		if code != 503 || !strings.Contains(fmt.Sprint(body["status"]), "envoy web is not ready: Envoy's /ready says 503 \"INITIALIZING\"") {
			t.Fatalf("/readyz %d %v, want 503 naming the Envoy and its state", code, body["status"])
		}
		time.Sleep(700 * time.Millisecond)
	}
	if st := envoyStatus(t, s.ag); st.Restarts != 0 {
		t.Fatalf("a slow Envoy was restarted: %+v", st)
	}
}

// TestEnvoyNotReadyUntilAcked: an Envoy LIVE without its first config
// (its initial fetch timed out: nothing to relay, the central is
// unreachable and nothing is saved) is not ready.
func TestEnvoyNotReadyUntilAcked(t *testing.T) {
	dir := t.TempDir()
	record := filepath.Join(dir, "record.jsonl")
	cfg := agent.EnvoyConfig{Name: "web", Binary: fakeEnvoyBinary(t), NodeID: "vm-1-web", Cluster: "web", AdminPort: freePort(t),
		DrainTime: time.Second, ParentShutdownTime: 2 * time.Second, DrainStrategy: "immediate",
		Args: []string{"--x-fake-record", record, "--x-fake-initial-fetch-timeout", "100ms"}}
	cfg.BaseID = cfg.AdminPort
	ag := startAgentWith(t, dir, func(c *agent.Config) { c.Envoys = []agent.EnvoyConfig{cfg} }) // upstream: nothing listens
	eventually(t, 10*time.Second, "Envoy LIVE", func() bool { return envoyStatus(t, ag).Live })
	time.Sleep(1500 * time.Millisecond)
	if st := envoyStatus(t, ag); st.Ready || st.Acked || !strings.Contains(st.Reason, "has not ACKed its first config") {
		t.Fatalf("status %+v: want not ready until its first config is ACKed", st)
	}
	if code, _ := agentReadyz(t, ag); code != 503 {
		t.Fatalf("/readyz %d", code)
	}
}

// TestEnvoyRestartedWhenKilled: a killed Envoy is started again (epoch
// 0: nothing is left to hot-restart from), /readyz and the status say
// why, and an Envoy crashing in a loop is restarted with a growing,
// bounded back-off.
func TestEnvoyRestartedWhenKilled(t *testing.T) {
	s := startEnvoyAgent(t, nil)
	first := s.waitReady(t, 0)
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var st agent.EnvoyStatus
	eventually(t, 15*time.Second, "a new ready Envoy", func() bool {
		st = envoyStatus(t, s.ag)
		return st.Ready && st.PID != first.PID
	})
	if st.Restarts != 1 || st.Epoch != 0 || !strings.Contains(st.LastExit, "was killed by killed") {
		t.Fatalf("after a kill: %+v, want 1 restart at epoch 0 saying it was killed", st)
	}
	starts := find(readEvents(t, s.record), func(e envoyEvent) bool { return e.Event == "start" })
	if len(starts) != 2 || starts[1].Args[3] != "0" {
		t.Fatalf("starts %+v, want a second start with --restart-epoch 0", starts)
	}
}

func TestEnvoyCrashLoopBacksOff(t *testing.T) {
	s := startEnvoyAgent(t, func(c *agent.EnvoyConfig) { c.Args = append(c.Args, "--x-fake-exit-after", "20ms") })
	eventually(t, 10*time.Second, "a few restarts", func() bool { return envoyStatus(t, s.ag).Restarts >= 4 })
	code, body := agentReadyz(t, s.ag)
	if code != 503 || !strings.Contains(fmt.Sprint(body["status"]), "exited with status 1 after") || !strings.Contains(fmt.Sprint(body["status"]), "restarting in") {
		t.Errorf("/readyz %d %v, want 503 saying how it exited and when it restarts", code, body["status"])
	}
	time.Sleep(2 * time.Second)
	starts := find(readEvents(t, s.record), func(e envoyEvent) bool { return e.Event == "start" })
	// Back-off 100ms doubling to 400ms: no more than ~1 start per 400ms
	// once grown (a loop without back-off would start dozens).
	var gaps []int64
	for i := 1; i < len(starts); i++ {
		gaps = append(gaps, starts[i].T-starts[i-1].T)
	}
	if len(starts) > 16 {
		t.Fatalf("%d starts in a crash loop: no back-off (gaps %v ms)", len(starts), gaps)
	}
	for _, g := range gaps[3:] {
		if g < 380 || g > 2000 {
			t.Fatalf("start gaps %v ms: want them grown to the 400ms cap and bounded", gaps)
		}
	}
}

// TestEnvoyHotRestart: a changed envoy block, then a replaced binary,
// each start epoch N+1 beside N (the same block re-offered unchanged
// starts nothing); N keeps answering its connections, told to drain by
// N+1 once LIVE, until N+1 shuts it down after parent_shutdown_time.
func TestEnvoyHotRestart(t *testing.T) {
	traffic := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var bin string
	s := startEnvoyAgent(t, func(c *agent.EnvoyConfig) {
		bin = filepath.Join(t.TempDir(), "envoy")
		if err := copyFile(c.Binary, bin); err != nil {
			t.Fatal(err)
		}
		c.Binary = bin
		c.Args = append(c.Args, "--x-fake-listen", traffic)
	})
	s.waitReady(t, 0)
	s.ag.ReloadEnvoys([]agent.EnvoyConfig{s.cfg}) // unchanged
	old := dialKept(t, traffic)
	if body, _ := old.get(t); !strings.HasPrefix(body, "epoch 0") {
		t.Fatalf("traffic answered %q, want epoch 0", body)
	}
	changed := s.cfg
	changed.Concurrency = 3
	s.ag.ReloadEnvoys([]agent.EnvoyConfig{changed})
	st := s.waitReady(t, 1)
	if st.HotRestarts != 1 {
		t.Fatalf("status %+v, want one hot restart", st)
	}
	// Once epoch 1 has told it to drain, epoch 0 still answers its open
	// connection, encouraging it to close.
	eventually(t, 5*time.Second, "epoch 1 to tell epoch 0 to drain", func() bool {
		return len(find(readEvents(t, s.record), func(e envoyEvent) bool { return e.Event == "hot_restart_drain" })) == 1
	})
	if body, conn := old.get(t); !strings.HasPrefix(body, "epoch 0") || !conn {
		t.Fatalf("the old connection got %q (Connection: close %v), want epoch 0 draining it", body, conn)
	}
	if body, _ := dialKept(t, traffic).get(t); !strings.HasPrefix(body, "epoch 1") {
		t.Fatalf("a new connection got %q, want epoch 1", body)
	}
	eventually(t, 10*time.Second, "epoch 0 to exit", func() bool {
		return len(find(readEvents(t, s.record), func(e envoyEvent) bool { return e.Event == "exit" && e.Epoch == 0 })) == 1
	})
	evs := readEvents(t, s.record)
	starts := find(evs, func(e envoyEvent) bool { return e.Event == "start" })
	if len(starts) != 2 || starts[1].Args[3] != "1" || !slices.Contains(starts[1].Args, "3") {
		t.Fatalf("starts %+v, want epoch 1 with the new concurrency", starts)
	}
	live1 := find(evs, func(e envoyEvent) bool { return e.Event == "state" && e.State == "LIVE" && e.Epoch == 1 })
	drain0 := find(evs, func(e envoyEvent) bool { return e.Event == "hot_restart_drain" && e.Epoch == 0 })
	exit0 := find(evs, func(e envoyEvent) bool { return e.Event == "exit" && e.Epoch == 0 })
	if len(live1) != 1 || len(drain0) != 1 || drain0[0].T < live1[0].T || exit0[0].Why != "terminated by the child epoch" ||
		exit0[0].T-drain0[0].T < 1500 {
		t.Fatalf("epoch 0 drained %+v, exited %+v; epoch 1 live %+v: want the drain after epoch 1 is LIVE and the exit by the child's request ~2s later", drain0, exit0, live1)
	}
	// An upgraded binary (replaced, as a package manager does) hot-restarts
	// the same block.
	next := bin + ".new"
	if err := copyFile(bin, next); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(next, os.O_APPEND|os.O_WRONLY, 0)
	_, _ = f.Write([]byte("upgrade"))
	f.Close()
	if err := os.Rename(next, bin); err != nil {
		t.Fatal(err)
	}
	s.ag.ReloadEnvoys([]agent.EnvoyConfig{changed})
	s.waitReady(t, 2)
}

// TestEnvoyColdRestartWhenIncompatible: a binary whose hot restart
// version differs from the running Envoy's cannot hot-restart it; the
// agent drains the old Envoy, stops it and starts the new one at epoch 0
// (a new epoch would fail against the old one).
func TestEnvoyColdRestartWhenIncompatible(t *testing.T) {
	var bin string
	s := startEnvoyAgent(t, func(c *agent.EnvoyConfig) {
		bin = filepath.Join(t.TempDir(), "envoy")
		if err := copyFile(c.Binary, bin); err != nil {
			t.Fatal(err)
		}
		c.Binary = bin
	})
	first := s.waitReady(t, 0)
	buildFakeEnvoy(t, bin+".new", "12.0")
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
	s.ag.ReloadEnvoys([]agent.EnvoyConfig{s.cfg})
	var st agent.EnvoyStatus
	eventually(t, 20*time.Second, "the new binary ready", func() bool {
		st = envoyStatus(t, s.ag)
		return st.Ready && st.PID != first.PID
	})
	evs := readEvents(t, s.record)
	starts := find(evs, func(e envoyEvent) bool { return e.Event == "start" })
	drain := find(evs, func(e envoyEvent) bool { return e.Event == "drain_listeners" && e.PID == first.PID })
	if st.Epoch != 0 || len(starts) != 2 || starts[1].Args[3] != "0" || len(drain) != 1 || !drain[0].Graceful || drain[0].T > starts[1].T {
		t.Fatalf("status %+v, starts %+v, drains %+v: want the old Envoy drained, then the new one at epoch 0", st, starts, drain)
	}
}

// TestEnvoyColdRestartOnNewBaseID: Envoy hot-restarts only within one
// base id, so a changed base_id (or admin_port, its default) drains and
// restarts Envoy at epoch 0.
func TestEnvoyColdRestartOnNewBaseID(t *testing.T) {
	s := startEnvoyAgent(t, nil)
	first := s.waitReady(t, 0)
	next := s.cfg
	next.AdminPort = freePort(t)
	next.BaseID = next.AdminPort
	s.ag.ReloadEnvoys([]agent.EnvoyConfig{next})
	var st agent.EnvoyStatus
	eventually(t, 20*time.Second, "Envoy on its new base id", func() bool {
		st = envoyStatus(t, s.ag)
		return st.Ready && st.PID != first.PID
	})
	starts := find(readEvents(t, s.record), func(e envoyEvent) bool { return e.Event == "start" })
	if st.Epoch != 0 || st.HotRestarts != 0 || len(starts) != 2 || !slices.Contains(starts[1].Args, strconv.Itoa(next.BaseID)) {
		t.Fatalf("status %+v, starts %+v: want a fresh start at epoch 0 with the new base id", st, starts)
	}
}

// TestEnvoyDrainedOnStop: stopping the agent drains Envoy first (POST
// /drain_listeners?graceful), waits drain_time, then asks it to quit.
func TestEnvoyDrainedOnStop(t *testing.T) {
	s := startEnvoyAgent(t, nil)
	s.waitReady(t, 0)
	start := time.Now()
	s.ag.stop()
	took := time.Since(start)
	evs := readEvents(t, s.record)
	drain := find(evs, func(e envoyEvent) bool { return e.Event == "drain_listeners" })
	quit := find(evs, func(e envoyEvent) bool { return e.Event == "quitquitquit" })
	exit := find(evs, func(e envoyEvent) bool { return e.Event == "exit" })
	if len(drain) != 1 || !drain[0].Graceful || len(quit) != 1 || len(exit) != 1 {
		t.Fatalf("events %+v: want one graceful drain, then quitquitquit and the exit", evs)
	}
	if d := quit[0].T - drain[0].T; d < 950 || d > 3000 {
		t.Fatalf("quit %d ms after the drain, want drain_time (1s)", d)
	}
	if took < time.Second {
		t.Fatalf("the agent stopped in %s, before drain_time", took)
	}
}

// TestEnvoyStopDuringHotRestartDrainsTheNewEpoch: stopping the agent
// while a new epoch has started but its parent still holds the admin
// port (the new one takes it over first thing; here it waits 1s) drains
// the new epoch, not the parent, and only then asks it to quit.
func TestEnvoyStopDuringHotRestartDrainsTheNewEpoch(t *testing.T) {
	s := startEnvoyAgent(t, func(c *agent.EnvoyConfig) { c.Args = append(c.Args, "--x-fake-admin-delay", "1s") })
	s.waitReady(t, 0)
	changed := s.cfg
	changed.Concurrency = 3
	s.ag.ReloadEnvoys([]agent.EnvoyConfig{changed})
	eventually(t, 10*time.Second, "epoch 1 started", func() bool {
		return len(find(readEvents(t, s.record), func(e envoyEvent) bool { return e.Event == "start" && e.Epoch == 1 })) == 1
	})
	s.ag.stop()
	evs := readEvents(t, s.record)
	drain := find(evs, func(e envoyEvent) bool { return e.Event == "drain_listeners" && e.Graceful })
	quit := find(evs, func(e envoyEvent) bool { return e.Event == "quitquitquit" && e.Epoch == 1 })
	if len(drain) != 1 || drain[0].Epoch != 1 || len(quit) != 1 || quit[0].T-drain[0].T < 950 {
		t.Fatalf("drains %+v, quit %+v: want epoch 1 drained, then asked to quit after drain_time", drain, quit)
	}
}

// TestEnvoyMetricsMerged: /metrics carries Envoy's stats with the
// proxy's labels; an Envoy (or whatever holds its admin port) cannot add
// or shadow the agent's own metrics or its labels.
func TestEnvoyMetricsMerged(t *testing.T) {
	s := startEnvoyAgent(t, func(c *agent.EnvoyConfig) {
		c.Args = append(c.Args, "--x-fake-stats", "# TYPE consul_xds_bridge_agent_upstream_streams gauge\nconsul_xds_bridge_agent_upstream_streams 99\n"+
			"# TYPE envoy_evil gauge\nenvoy_evil{node_id=\"someone-else\",group=\"other\"} 1")
	})
	s.waitReady(t, 0)
	m := getText(t, "http://"+s.ag.AdminAddr().String()+"/metrics")
	for _, want := range []string{
		`envoy_server_live{envoy="web",group="web",node_id="vm-1-web"} 1`,
		`envoy_cluster_upstream_rq_total{envoy="web",envoy_cluster_name="xds_cluster",group="web",node_id="vm-1-web"} 7`,
		`envoy_evil{envoy="web",group="web",node_id="vm-1-web"} 1`,
		`consul_xds_bridge_agent_envoy_ready{envoy="web"} 1`,
		"consul_xds_bridge_agent_upstream_streams 1",
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(m, " 99") || strings.Contains(m, "someone-else") {
		t.Errorf("/metrics carries what the Envoy's port claimed about the agent or another proxy:\n%s", m)
	}
}

// TestEnvoyRemovedBlockIsDrained: a reload without the block drains and
// stops its Envoy; /readyz no longer waits for it.
func TestEnvoyRemovedBlockIsDrained(t *testing.T) {
	s := startEnvoyAgent(t, nil)
	s.waitReady(t, 0)
	s.ag.ReloadEnvoys(nil)
	eventually(t, 10*time.Second, "the Envoy to exit", func() bool {
		return len(find(readEvents(t, s.record), func(e envoyEvent) bool { return e.Event == "exit" })) == 1
	})
	if len(find(readEvents(t, s.record), func(e envoyEvent) bool { return e.Event == "drain_listeners" })) != 1 {
		t.Fatal("a removed block's Envoy was stopped without a drain")
	}
	if code, _ := agentReadyz(t, s.ag); code != http.StatusOK {
		t.Fatalf("/readyz %d after the block was removed", code)
	}
}

// TestEnvoyHostileAdminPort: stats too large to merge are left out and
// counted, and /metrics still answers; a process holding an Envoy's
// admin port and claiming LIVE does not make the agent ready: Envoy
// cannot bind its admin port and exits, and is restarted with back-off,
// the status saying so.
func TestEnvoyHostileAdminPort(t *testing.T) {
	t.Run("stats too large", func(t *testing.T) {
		s := startEnvoyAgent(t, func(c *agent.EnvoyConfig) { c.Args = append(c.Args, "--x-fake-stats-pad", strconv.Itoa(40<<20)) })
		s.waitReady(t, 0)
		m := getText(t, "http://"+s.ag.AdminAddr().String()+"/metrics")
		if strings.Contains(m, "envoy_pad") || !strings.Contains(m, `consul_xds_bridge_agent_envoy_stats_errors_total{envoy="web"} 1`) ||
			!strings.Contains(m, `consul_xds_bridge_agent_envoy_ready{envoy="web"} 1`) {
			t.Fatalf("/metrics with oversized Envoy stats:\n%.2000s", m)
		}
	})
	t.Run("port squatter", func(t *testing.T) {
		port := freePort(t)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "LIVE") })}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		s := startEnvoyAgent(t, func(c *agent.EnvoyConfig) { c.AdminPort, c.BaseID = port, port })
		eventually(t, 10*time.Second, "Envoy to fail and be restarted", func() bool { return envoyStatus(t, s.ag).Restarts >= 2 })
		time.Sleep(1200 * time.Millisecond)
		st := envoyStatus(t, s.ag)
		if st.Ready || !strings.Contains(st.LastExit, "exited with status 1") {
			t.Fatalf("status %+v: want not ready, Envoy exiting as it cannot bind its admin port", st)
		}
		if code, _ := agentReadyz(t, s.ag); code != 503 {
			t.Fatalf("/readyz %d with a squatter on the admin port", code)
		}
	})
}

// TestSlowChildKeepsItsParent: Envoy's new epoch starts its parent's
// shutdown clock only once it has initialized, so a child slow to become
// LIVE (a big config, initial_fetch_timeout) leaves its parent serving
// past parent_shutdown_time; the agent terminates a parent only that long
// (plus its grace) after the child is LIVE. Counted from the child's
// start, it terminated a parent that had not even been told to drain.
func TestSlowChildKeepsItsParent(t *testing.T) {
	t.Cleanup(agent.SetEnvoyParentGrace(500 * time.Millisecond))
	s := startEnvoyAgent(t, nil)
	s.waitReady(t, 0)
	slow := s.cfg
	slow.Args = append(slices.Clone(s.cfg.Args), "--x-fake-never-live")
	s.ag.ReloadEnvoys([]agent.EnvoyConfig{slow})
	eventually(t, 10*time.Second, "epoch 1 to start", func() bool {
		return len(find(readEvents(t, s.record), func(e envoyEvent) bool { return e.Event == "start" && e.Epoch == 1 })) == 1
	})
	// parent_shutdown_time (2 s) + the grace, and more: epoch 1 is not
	// LIVE, so epoch 0 keeps serving.
	time.Sleep(s.cfg.ParentShutdownTime + 2*time.Second)
	start0 := find(readEvents(t, s.record), func(e envoyEvent) bool { return e.Event == "start" && e.Epoch == 0 })
	if len(start0) != 1 {
		t.Fatalf("epoch 0 starts %+v", start0)
	}
	// Alive: signal 0 reaches it (the agent reaps an epoch that exits).
	if err := syscall.Kill(start0[0].PID, 0); err != nil {
		t.Fatalf("epoch 0 (pid %d) is gone (%v) while its child was still initializing: its shutdown clock starts when the child is LIVE", start0[0].PID, err)
	}
}
