package bridge_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// harness is a bridge running against a real Consul agent through a TCP
// forwarder, so tests can cut its path to Consul.
type harness struct {
	agent  *consultest.Agent
	fwd    *consultest.Forwarder
	daemon *bridge.Daemon
}

func startBridge(t *testing.T, agent *consultest.Agent, fwd *consultest.Forwarder) *harness {
	t.Helper()
	return startBridgeWith(t, agent, fwd, func(*bridge.Config) {})
}

// startBridgeWith starts a bridge whose config the caller may adjust (policy
// files, KV prefix) before it runs.
func startBridgeWith(t *testing.T, agent *consultest.Agent, fwd *consultest.Forwarder, adjust func(*bridge.Config)) *harness {
	t.Helper()
	s := policy.DefaultSettings()
	s.Consul.Address = fwd.Addr()
	// Short waits and backoff keep outage recovery quick in tests.
	s.Consul.WaitTime = 5 * time.Second
	s.XDS.Listen = "127.0.0.1:0"
	s.Admin.Listen = "127.0.0.1:0"
	// Tests serve TLS keys to proxies on loopback over plaintext xDS; the
	// refusal without this switch has its own tests (keytransport_*).
	s.XDS.InsecureServeKeys = true
	s.Admin.TokenFile = filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(s.Admin.TokenFile, []byte("tok-"+t.Name()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := bridge.Config{
		Settings: s,
		Logger:   zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
		Query:    consul.QueryOptions{BackoffInitial: 100 * time.Millisecond, BackoffMax: time.Second},
	}
	adjust(&cfg)
	d := bridge.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("bridge Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("bridge did not stop within 15s")
		}
	})
	select {
	case <-d.Started():
	case err := <-done:
		t.Fatalf("bridge failed to start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("bridge did not start")
	}
	trackAdmin(t, d)
	return &harness{agent: agent, fwd: fwd, daemon: d}
}

// adminTokens maps a started daemon's admin address to its token, so
// get and adminGet send it.
var adminTokens sync.Map

// trackAdmin records a started daemon's admin token for get and adminGet.
func trackAdmin(t *testing.T, d *bridge.Daemon) {
	t.Helper()
	b, err := os.ReadFile(d.AdminTokenFile())
	if err != nil {
		t.Fatalf("admin token: %v", err)
	}
	addr := d.AdminAddr().String()
	adminTokens.Store(addr, strings.TrimSpace(string(b)))
	t.Cleanup(func() { adminTokens.Delete(addr) })
}

// adminGet is http.Get with the admin token of the daemon at the URL's
// address, if known.
func adminGet(rawURL string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	if tok, ok := adminTokens.Load(req.URL.Host); ok {
		req.Header.Set("Authorization", "Bearer "+tok.(string))
	}
	return http.DefaultClient.Do(req)
}

// watcher records every endpoint set a client ever held for one cluster.
type recorder struct {
	mu      sync.Mutex
	cluster string
	history [][]adsclient.Endpoint
}

func (r *recorder) onUpdate(u adsclient.Update) {
	if u.TypeURL != adsclient.EndpointType {
		return
	}
	eps := u.State.Endpoints(r.cluster)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.history = append(r.history, eps)
}

func (r *recorder) since(i int) [][]adsclient.Endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.history[min(i, len(r.history)):])
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.history)
}

func dial(t *testing.T, h *harness, mode adsclient.Mode, rec *recorder) *adsclient.Client {
	t.Helper()
	return dialAs(t, h, mode, "anything", rec)
}

func dialAs(t *testing.T, h *harness, mode adsclient.Mode, nodeCluster string, rec *recorder) *adsclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: "test-" + mode.String() + "-" + nodeCluster, Cluster: nodeCluster, Mode: mode}
	if rec != nil {
		cfg.OnUpdate = rec.onUpdate
	}
	c, err := adsclient.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// summary renders endpoints as "127.0.0.1:1001=HEALTHY,..." sorted.
func summary(eps []adsclient.Endpoint) string {
	var s []string
	for _, e := range eps {
		s = append(s, e.Address+"="+e.Health)
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}

func healthy(eps []adsclient.Endpoint) int {
	n := 0
	for _, e := range eps {
		if e.Health == "HEALTHY" {
			n++
		}
	}
	return n
}

// waitEndpoints waits until every client holds want for cluster and
// returns how long that took.
func waitEndpoints(t *testing.T, cluster, want string, clients ...*adsclient.Client) time.Duration {
	t.Helper()
	start := time.Now()
	for _, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, err := c.Wait(ctx, func(s adsclient.State) bool { return summary(s.Endpoints(cluster)) == want })
		cancel()
		if err != nil {
			t.Fatalf("waiting for %s endpoints %q: %v", cluster, want, err)
		}
	}
	return time.Since(start)
}

func waitClusters(t *testing.T, pred func([]string) bool, what string, clients ...*adsclient.Client) {
	t.Helper()
	for _, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, err := c.Wait(ctx, func(s adsclient.State) bool { return pred(s.ClusterNames()) })
		cancel()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
}

func ep(port int, health string) string { return fmt.Sprintf("127.0.0.1:%d=%s", port, health) }

func join(s ...string) string { slices.Sort(s); return strings.Join(s, ",") }

// TestCatalogToEDSEndToEnd follows the foundation's acceptance: instances
// registering, failing, deregistering and services coming and going reach
// both a SotW and a delta ADS client, quickly.
func TestCatalogToEDSEndToEnd(t *testing.T) {
	agent := consultest.Start(t)
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	for i := 1; i <= 3; i++ {
		agent.RegisterTTL(t, "web", fmt.Sprintf("web-%d", i), 1000+i, nil, nil)
	}
	h := startBridge(t, agent, fwd)
	sotw := dial(t, h, adsclient.SotW, nil)
	delta := dial(t, h, adsclient.Delta, nil)

	all3 := join(ep(1001, "HEALTHY"), ep(1002, "HEALTHY"), ep(1003, "HEALTHY"))
	waitEndpoints(t, "web", all3, sotw, delta)
	cl := sotw.Snapshot().Cluster("web")
	if cl.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil || cl.GetConnectTimeout().AsDuration() <= 0 {
		t.Fatalf("web cluster is not EDS over ADS with a connect timeout: %v", cl)
	}
	if lle := sotw.Snapshot().LoadAssignment("web").GetEndpoints(); len(lle) != 1 || lle[0].GetLocality().GetRegion() != "dc1" {
		t.Fatalf("web locality: want region dc1, got %v", lle)
	}

	agent.SetTTL(t, "service:web-2", "critical")
	took := waitEndpoints(t, "web", join(ep(1001, "HEALTHY"), ep(1002, "UNHEALTHY"), ep(1003, "HEALTHY")), sotw, delta)
	t.Logf("health change reached both clients in %v", took)
	if took > 2*time.Second {
		t.Errorf("health change took %v to reach clients; want well under a second", took)
	}

	agent.SetTTL(t, "service:web-2", "warning")
	waitEndpoints(t, "web", all3, sotw, delta)

	agent.Deregister(t, "web-3")
	waitEndpoints(t, "web", join(ep(1001, "HEALTHY"), ep(1002, "HEALTHY")), sotw, delta)

	agent.RegisterTTL(t, "api", "api-1", 2001, nil, nil)
	waitClusters(t, func(n []string) bool { return slices.Contains(n, "api") }, "cluster api", sotw, delta)
	waitEndpoints(t, "api", ep(2001, "HEALTHY"), sotw, delta)

	agent.Deregister(t, "api-1")
	waitClusters(t, func(n []string) bool { return !slices.Contains(n, "api") && slices.Contains(n, "web") }, "cluster api removed", sotw, delta)
	for _, c := range []*adsclient.Client{sotw, delta} {
		if names := c.Snapshot().LoadAssignmentNames(); slices.Contains(names, "api") {
			t.Errorf("api endpoints still held after its cluster went: %v", names)
		}
	}
}

// TestNoPartialStateBeforeFirstSync: a proxy that connects while Consul is
// unreachable gets nothing, not an empty world, and readiness says why.
func TestNoPartialStateBeforeFirstSync(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	fwd.Stop()
	h := startBridge(t, agent, fwd)
	c := dial(t, h, adsclient.SotW, nil)

	time.Sleep(1500 * time.Millisecond)
	if st := c.Stats(); st.Responses[adsclient.ClusterType] != 0 || st.Responses[adsclient.EndpointType] != 0 {
		t.Fatalf("proxy was answered before the first Consul sync: %v", st.Responses)
	}
	if code := getStatus(t, "http://"+h.daemon.AdminAddr().String()+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d before sync, want 503", code)
	}

	fwd.Start()
	waitEndpoints(t, "web", ep(1001, "HEALTHY"), c)
	if code := getStatus(t, "http://"+h.daemon.AdminAddr().String()+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d after sync, want 200", code)
	}
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := adminGet(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestConsulOutageKeepsLastGoodState cuts the bridge's path to Consul and
// then freezes the agent; neither may shrink what proxies hold, and changes
// flow again after each recovery.
func TestConsulOutageKeepsLastGoodState(t *testing.T) {
	agent := consultest.Start(t)
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	for i := 1; i <= 3; i++ {
		agent.RegisterTTL(t, "web", fmt.Sprintf("web-%d", i), 1000+i, nil, nil)
		agent.RegisterTTL(t, "api", fmt.Sprintf("api-%d", i), 2000+i, nil, nil)
		agent.RegisterTTL(t, "carts", fmt.Sprintf("carts-%d", i), 3000+i, nil, nil)
	}
	h := startBridge(t, agent, fwd)
	recS := &recorder{cluster: "web"}
	recD := &recorder{cluster: "web"}
	sotw := dial(t, h, adsclient.SotW, recS)
	delta := dial(t, h, adsclient.Delta, recD)
	all3 := join(ep(1001, "HEALTHY"), ep(1002, "HEALTHY"), ep(1003, "HEALTHY"))
	waitEndpoints(t, "web", all3, sotw, delta)

	checkNoShrink := func(phase string, fromS, fromD int, want int) {
		t.Helper()
		for name, hist := range map[string][][]adsclient.Endpoint{"sotw": recS.since(fromS), "delta": recD.since(fromD)} {
			for _, eps := range hist {
				if healthy(eps) < want {
					t.Errorf("%s: %s client received %d healthy web endpoints (%s), had %d", phase, name, healthy(eps), summary(eps), want)
				}
			}
		}
	}

	// (a) The path to Consul is cut: refused and reset connections.
	fromS, fromD := recS.len(), recD.len()
	fwd.Stop()
	time.Sleep(10 * time.Second)
	fwd.Start()
	// Give the bridge's backoff (capped at 1s in tests) time to reconnect.
	time.Sleep(1500 * time.Millisecond)
	agent.RegisterTTL(t, "web", "web-4", 1004, nil, nil)
	all4 := join(all3, ep(1004, "HEALTHY"))
	took := waitEndpoints(t, "web", all4, sotw, delta)
	t.Logf("after the path to Consul came back, a new instance reached both clients in %v", took)
	if took > 5*time.Second {
		t.Errorf("new instance took %v after recovery", took)
	}
	checkNoShrink("path cut", fromS, fromD, 3)

	// (b) The agent hangs: connections open, no answers.
	fromS, fromD = recS.len(), recD.len()
	agent.Freeze()
	time.Sleep(10 * time.Second)
	agent.Thaw()
	agent.RegisterTTL(t, "web", "web-5", 1005, nil, nil)
	took = waitEndpoints(t, "web", join(all4, ep(1005, "HEALTHY")), sotw, delta)
	t.Logf("after the agent thawed, a new instance reached both clients in %v", took)
	if took > 5*time.Second {
		t.Errorf("new instance took %v after the agent thawed", took)
	}
	checkNoShrink("agent frozen", fromS, fromD, 4)
}
