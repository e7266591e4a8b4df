package agent_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// central is a central bridge on a fixed port, so it can be stopped and
// started again where the agent expects it.
type central struct {
	t      testing.TB
	adjust []func(*policy.Settings)
	consul string
	addr   string
	cancel context.CancelFunc
	done   chan error
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startCentral(t testing.TB, consulAddr, addr string, adjust ...func(*policy.Settings)) *central {
	t.Helper()
	c := &central{t: t, consul: consulAddr, addr: addr, adjust: adjust}
	c.start()
	t.Cleanup(c.stop)
	return c
}

func (c *central) start() {
	c.t.Helper()
	s := policy.DefaultSettings()
	s.Consul.Address = c.consul
	s.Consul.WaitTime = 5 * time.Second
	s.XDS.Listen = c.addr
	s.Admin.Listen = "127.0.0.1:0"
	for _, f := range c.adjust {
		f(&s)
	}
	d := bridge.New(bridge.Config{Settings: s, Logger: zerolog.New(zerolog.NewTestWriter(c.t)).Level(zerolog.WarnLevel),
		Query: consul.QueryOptions{BackoffInitial: 100 * time.Millisecond, BackoffMax: time.Second}})
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan error, 1)
	go func() { c.done <- d.Run(ctx) }()
	select {
	case <-d.Started():
	case err := <-c.done:
		c.t.Fatalf("central bridge failed to start: %v", err)
	case <-time.After(15 * time.Second):
		c.t.Fatal("central bridge did not start")
	}
}

func (c *central) stop() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		c.t.Error("central bridge did not stop")
	}
	c.cancel = nil
}

type runningAgent struct {
	*agent.Agent
	cancel context.CancelFunc
	done   chan error
}

type agentConfig = agent.Config

func startAgent(t testing.TB, dir string, upstreams ...string) *runningAgent {
	t.Helper()
	return startAgentWith(t, dir, func(c *agent.Config) { c.Upstreams = upstreams })
}

// startAgentWith starts an agent whose config adjust may change; logs, if
// given, also receive its log (at debug level).
func startAgentWith(t testing.TB, dir string, adjust func(*agent.Config), logs ...io.Writer) *runningAgent {
	t.Helper()
	cfg := &agent.Config{
		NodeID: "vm-1", DataDir: filepath.Join(dir, "data"), AllowGroups: []string{"web", "edge-*"}, AllowNodeIDs: []string{"*"},
		Socket: filepath.Join(dir, "agent.sock"), SocketMode: 0o660, Upstreams: []string{"127.0.0.1:1"}, AdminListen: "127.0.0.1:0",
		BackoffInitial: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
	}
	adjust(cfg)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	if len(logs) > 0 {
		log = zerolog.New(io.MultiWriter(append(logs, zerolog.NewTestWriter(t))...)).Level(zerolog.DebugLevel)
	}
	a := agent.New(cfg, log)
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{Agent: a, cancel: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Run(ctx) }()
	select {
	case <-a.Started():
	case err := <-ra.done:
		t.Fatalf("agent failed to start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not start")
	}
	t.Cleanup(ra.stop)
	return ra
}

func (a *runningAgent) stop() {
	if a.cancel == nil {
		return
	}
	a.cancel()
	<-a.done
	a.cancel = nil
}

func dial(t testing.TB, addr, cluster string, mode adsclient.Mode) *adsclient.Client {
	t.Helper()
	return dialWith(t, adsclient.Config{Addr: addr, NodeID: "envoy-" + mode.String(), Cluster: cluster, Mode: mode})
}

// dialWith dials a proxy of cfg, closed at the test's end.
func dialWith(t testing.TB, cfg adsclient.Config) *adsclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func health(s adsclient.State, cluster string) string {
	var out []string
	for _, e := range s.Endpoints(cluster) {
		out = append(out, e.Address+"="+e.Health)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func wait(t testing.TB, c *adsclient.Client, what string, within time.Duration, pred func(adsclient.State) bool) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := c.Wait(ctx, pred); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	return time.Since(start)
}

// same reports how two clients' states differ ("" if they hold the same
// resources at the same versions, byte for byte).
func same(a, b adsclient.State) string {
	for _, typ := range []string{adsclient.ClusterType, adsclient.EndpointType, adsclient.ListenerType, adsclient.RouteType} {
		ta, tb := a.Types[typ], b.Types[typ]
		if ta.Version != tb.Version {
			return fmt.Sprintf("%s version %q vs %q", typ, ta.Version, tb.Version)
		}
		if !slices.Equal(a.Names(typ), b.Names(typ)) {
			return fmt.Sprintf("%s names %v vs %v", typ, a.Names(typ), b.Names(typ))
		}
		for name, m := range ta.Resources {
			x, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			y, _ := proto.MarshalOptions{Deterministic: true}.Marshal(tb.Resources[name])
			if string(x) != string(y) {
				return fmt.Sprintf("%s %s differs", typ, name)
			}
			if ta.ResourceVersions != nil && tb.ResourceVersions != nil && ta.ResourceVersions[name] != tb.ResourceVersions[name] {
				return fmt.Sprintf("%s %s resource version %q vs %q", typ, name, ta.ResourceVersions[name], tb.ResourceVersions[name])
			}
		}
	}
	return ""
}

// TestAgentRelaysAndSurvivesCentralOutage: through the agent's socket a
// proxy gets exactly what it gets from the central bridge directly (SotW
// and delta); with the central bridge down its stream stays open, a
// proxy (re)starting gets the last good config at once, from memory and,
// after an agent restart, from disk; when the central bridge is back a
// health flip reaches it.
func TestAgentRelaysAndSurvivesCentralOutage(t *testing.T) {
	ca := consultest.Start(t)
	ca.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	ca.RegisterTTL(t, "web", "web-2", 1002, nil, nil)
	cen := startCentral(t, ca.HTTPAddr(), freeAddr(t))
	dir := t.TempDir()
	ag := startAgent(t, dir, cen.addr)
	sock := "unix://" + ag.SocketAddr().String()

	both := "127.0.0.1:1001=HEALTHY,127.0.0.1:1002=HEALTHY"
	for _, mode := range []adsclient.Mode{adsclient.SotW, adsclient.Delta} {
		direct := dial(t, cen.addr, "web", mode)
		relayed := dial(t, sock, "web", mode)
		for _, c := range []*adsclient.Client{direct, relayed} {
			wait(t, c, "web endpoints", 15*time.Second, func(s adsclient.State) bool { return health(s, "web") == both })
		}
		// Both settle (LDS follows warming) on the same resources.
		var diff string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			ds, rs := direct.Snapshot(), relayed.Snapshot()
			if diff = same(ds, rs); diff == "" && ds.Types[adsclient.ListenerType].Version != "" {
				break
			}
		}
		if diff != "" {
			t.Fatalf("%v: through the agent != direct: %s", mode, diff)
		}
	}
	proxy := dial(t, sock, "web", adsclient.Delta)
	wait(t, proxy, "web endpoints", 15*time.Second, func(s adsclient.State) bool { return health(s, "web") == both })

	// A flip flows through.
	ca.SetTTL(t, "service:web-2", "critical")
	flipped := "127.0.0.1:1001=HEALTHY,127.0.0.1:1002=UNHEALTHY"
	took := wait(t, proxy, "the flip through the agent", 15*time.Second, func(s adsclient.State) bool { return health(s, "web") == flipped })
	t.Logf("health flip through the agent in %v", took)

	// The central bridge goes away.
	cen.stop()
	time.Sleep(300 * time.Millisecond)
	if err := proxy.Err(); err != nil {
		t.Fatalf("the local proxy's stream ended with the central bridge: %v", err)
	}
	restarted := dial(t, sock, "web", adsclient.Delta)
	took = wait(t, restarted, "the last good config from memory", 5*time.Second, func(s adsclient.State) bool { return health(s, "web") == flipped })
	if took > time.Second {
		t.Errorf("a proxy (re)starting during the outage got its config after %v, want within 1s", took)
	}

	// The agent restarts during the outage: from disk.
	ag.stop()
	ag = startAgent(t, dir, cen.addr)
	fromDisk := dial(t, sock, "web", adsclient.SotW)
	took = wait(t, fromDisk, "the last good config from disk", 5*time.Second, func(s adsclient.State) bool { return health(s, "web") == flipped })
	if took > time.Second {
		t.Errorf("after an agent restart during the outage, config came after %v, want within 1s", took)
	}
	if len(fromDisk.Snapshot().ListenerNames()) != len(restarted.Snapshot().ListenerNames()) || len(fromDisk.Snapshot().ClusterNames()) == 0 {
		t.Fatalf("the config from disk is not the whole last good config: %v", fromDisk.Snapshot().ClusterNames())
	}

	// The central bridge is back: updates flow again.
	cen.start()
	ca.SetTTL(t, "service:web-2", "passing")
	wait(t, fromDisk, "a flip after the central bridge came back", 20*time.Second, func(s adsclient.State) bool { return health(s, "web") == both })
}

// TestAgentFailsOverBetweenReplicas: with two central replicas, killing
// the one the agent streams from moves it to the other; the local proxy
// sees no stream reset and is resent nothing unchanged; the next flip
// arrives.
func TestAgentFailsOverBetweenReplicas(t *testing.T) {
	ca := consultest.Start(t)
	ca.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	one := startCentral(t, ca.HTTPAddr(), freeAddr(t))
	two := startCentral(t, ca.HTTPAddr(), freeAddr(t))
	ag := startAgent(t, t.TempDir(), one.addr, two.addr)
	proxy := dial(t, "unix://"+ag.SocketAddr().String(), "web", adsclient.Delta)
	wait(t, proxy, "web endpoints", 15*time.Second, func(s adsclient.State) bool { return health(s, "web") == "127.0.0.1:1001=HEALTHY" })
	time.Sleep(200 * time.Millisecond)
	before := proxy.Stats().Responses

	// The agent starts on the replica its node id hashes to.
	from, to := one, two
	if strings.Contains(readyz(t, ag), two.addr) {
		from, to = two, one
	}
	from.stop()
	// Wait for the agent to stream from the other replica.
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(fmt.Sprint(readyz(t, ag)), to.addr) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not move to the second replica: %v", readyz(t, ag))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if err := proxy.Err(); err != nil {
		t.Fatalf("the local proxy's stream was reset by the failover: %v", err)
	}
	if after := proxy.Stats().Responses; fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the failover resent unchanged resources: responses %v before, %v after", before, after)
	}
	ca.SetTTL(t, "service:web-1", "critical")
	wait(t, proxy, "the flip after failover", 15*time.Second, func(s adsclient.State) bool { return health(s, "web") == "127.0.0.1:1001=UNHEALTHY" })
}

func readyz(t *testing.T, a *runningAgent) string {
	t.Helper()
	resp, err := http.Get("http://" + a.AdminAddr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestAgentFindsReplicasInConsul: central bridges with consul.register are
// found by the agent (upstream consul_service) among the passing
// instances of their service; a stopped bridge deregisters, and the agent
// moves to the one left.
func TestAgentFindsReplicasInConsul(t *testing.T) {
	ca := consultest.Start(t)
	ca.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	reg := func(s *policy.Settings) { s.Consul.Register = &policy.RegisterSettings{Name: "xds-central"} }
	one := startCentral(t, ca.HTTPAddr(), freeAddr(t), reg)
	two := startCentral(t, ca.HTTPAddr(), freeAddr(t), reg)
	ag := startAgentWith(t, t.TempDir(), func(c *agent.Config) {
		c.Upstreams, c.ConsulService, c.ConsulAddress = nil, "xds-central", ca.HTTPAddr()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		entries, _, err := ca.Client().Health().Service("xds-central", "", true, nil)
		if err == nil && len(entries) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the central bridges did not register as passing: %d entries, %v", len(entries), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	proxy := dial(t, "unix://"+ag.SocketAddr().String(), "web", adsclient.Delta)
	wait(t, proxy, "web endpoints through a replica found in Consul", 20*time.Second, func(s adsclient.State) bool { return health(s, "web") == "127.0.0.1:1001=HEALTHY" })
	first := one
	if strings.Contains(readyz(t, ag), two.addr) {
		first = two
	}
	first.stop()
	if entries, _, _ := ca.Client().Health().Service("xds-central", "", false, nil); len(entries) != 1 {
		t.Fatalf("%d instances of xds-central after one bridge stopped, want 1 (it deregisters)", len(entries))
	}
	ca.SetTTL(t, "service:web-1", "critical")
	wait(t, proxy, "a flip through the replica left", 20*time.Second, func(s adsclient.State) bool { return health(s, "web") == "127.0.0.1:1001=UNHEALTHY" })
	if err := proxy.Err(); err != nil {
		t.Fatalf("the local stream ended: %v", err)
	}
}

// TestAgentsSpreadAcrossReplicas: agents given the same two replicas do
// not all stream from the first: each starts on the replica its node id
// and key hash to, so a fleet's relays divide between the replicas
// (issue 40's agent tier).
func TestAgentsSpreadAcrossReplicas(t *testing.T) {
	ca := consultest.Start(t)
	ca.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	one := startCentral(t, ca.HTTPAddr(), freeAddr(t))
	two := startCentral(t, ca.HTTPAddr(), freeAddr(t))
	on := map[string]int{}
	for i := range 8 {
		id := fmt.Sprintf("vm-%d", i)
		ag := startAgentWith(t, t.TempDir(), func(c *agent.Config) { c.NodeID, c.Upstreams = id, []string{one.addr, two.addr} })
		proxy := dial(t, "unix://"+ag.SocketAddr().String(), "web", adsclient.Delta)
		wait(t, proxy, "web endpoints", 15*time.Second, func(s adsclient.State) bool { return health(s, "web") == "127.0.0.1:1001=HEALTHY" })
		r := readyz(t, ag)
		switch {
		case strings.Contains(r, one.addr):
			on[one.addr]++
		case strings.Contains(r, two.addr):
			on[two.addr]++
		default:
			t.Fatalf("agent %s names no replica on /readyz: %s", id, r)
		}
	}
	t.Logf("relays per replica: %v", on)
	if on[one.addr] < 2 || on[two.addr] < 2 {
		t.Errorf("8 agents' relays per replica %v; want them divided (at least 2 on each)", on)
	}
}

// TestRegisteredWildcardListenIsDialable: a central bridge listening on
// every address (0.0.0.0) with consul.register and no address registers
// no service address, so Consul's catalog gives its node's (it used to
// register the listener's "::", which nobody can dial), and an agent that
// finds it through Consul reaches it.
func TestRegisteredWildcardListenIsDialable(t *testing.T) {
	ca := consultest.Start(t)
	ca.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	_, port, _ := net.SplitHostPort(freeAddr(t))
	startCentral(t, ca.HTTPAddr(), "0.0.0.0:"+port, func(s *policy.Settings) { s.Consul.Register = &policy.RegisterSettings{Name: "xds-wild"} })
	deadline := time.Now().Add(20 * time.Second)
	for {
		entries, _, err := ca.Client().Health().Service("xds-wild", "", true, nil)
		if err == nil && len(entries) == 1 {
			if a := entries[0].Service.Address; a != "" {
				t.Fatalf("registered service address %q; want none (the node's address, %s)", a, entries[0].Node.Address)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bridge did not register as passing: %d entries, %v", len(entries), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ag := startAgentWith(t, t.TempDir(), func(c *agent.Config) {
		c.Upstreams, c.ConsulService, c.ConsulAddress = nil, "xds-wild", ca.HTTPAddr()
	})
	proxy := dial(t, "unix://"+ag.SocketAddr().String(), "web", adsclient.Delta)
	wait(t, proxy, "web endpoints through the bridge found in Consul", 20*time.Second, func(s adsclient.State) bool { return health(s, "web") == "127.0.0.1:1001=HEALTHY" })
}
