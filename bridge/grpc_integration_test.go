package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// Proxyless gRPC end to end: real Consul, the bridge, real grpc-go servers
// and two real xDS clients, grpc-go (google.golang.org/grpc/xds) and
// grpc-node (@grpc/grpc-js-xds), that resolve xds:///NAME through the
// bridge with the bootstrap `bootstrap -grpc` prints (grpc_clients_test.go).

// echoServer answers grpc.testing.TestService/UnaryCall with its instance
// id, after sleeping as long as metadata x-sleep (a Go duration) asks.
type echoServer struct {
	testgrpc.UnimplementedTestServiceServer
	id string
}

// failedOnce are the x-fail-once keys an echo server already failed, for
// every backend: a retried call then succeeds wherever it lands.
var failedOnce sync.Map

func (e *echoServer) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-fail-once"); len(v) > 0 {
		if _, seen := failedOnce.LoadOrStore(v[0], true); !seen {
			return nil, status.Error(codes.Unavailable, "x-fail-once: failing the first attempt")
		}
	}
	if v := md.Get("x-sleep"); len(v) > 0 {
		d, err := time.ParseDuration(v[0])
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return &testgrpc.SimpleResponse{ServerId: e.id}, nil
}

type echoBackend struct {
	id   string
	port int
	srv  *grpc.Server
}

// startEchoBackends starts a gRPC server per id on a loopback port and
// registers it in Consul as an instance of service with the given tags
// (a TTL check, passing).
func startEchoBackends(t *testing.T, agent *consultest.Agent, service string, tags map[string][]string, ids ...string) map[string]*echoBackend {
	t.Helper()
	out := map[string]*echoBackend{}
	for _, id := range ids {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		testgrpc.RegisterTestServiceServer(s, &echoServer{id: id})
		go func() { _ = s.Serve(lis) }()
		t.Cleanup(s.Stop)
		b := &echoBackend{id: id, port: lis.Addr().(*net.TCPAddr).Port, srv: s}
		agent.RegisterTTL(t, service, id, b.port, tags[id], nil)
		out[id] = b
	}
	return out
}

func proxies(t *testing.T, h *harness) []serve.ProxyStatus {
	t.Helper()
	resp, err := adminGet("http://" + h.daemon.AdminAddr().String() + "/v1/proxies")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ps []serve.ProxyStatus
	if err := json.NewDecoder(resp.Body).Decode(&ps); err != nil {
		t.Fatal(err)
	}
	return ps
}

func proxyByNode(ps []serve.ProxyStatus, nodeID string) *serve.ProxyStatus {
	for i := range ps {
		if ps[i].NodeID == nodeID {
			return &ps[i]
		}
	}
	return nil
}

// TestProxylessGRPCEndToEnd, with each client: with no policy at all,
// xds:///echo reaches every healthy instance of Consul service echo,
// evenly; an instance whose check turns critical stops getting calls at
// once, and deregistering (and stopping) it costs no call an error; with
// no healthy instance left calls fail, and they succeed again as soon as
// one recovers.
func TestProxylessGRPCEndToEnd(t *testing.T) {
	forEachImpl(t, testProxylessGRPCEndToEnd)
}

func testProxylessGRPCEndToEnd(t *testing.T, impl grpcImpl) {
	agent := consultest.Start(t)
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	ids := []string{"echo-1", "echo-2", "echo-3"}
	backends := startEchoBackends(t, agent, "echo", nil, ids...)
	h := startBridge(t, agent, fwd)
	c := dialXDS(t, impl, h, "grpc-e2e-1", "apps", "xds:///echo")

	warmUp(t, c, ids...)
	const n = 300
	counts := callN(t, c, n)
	t.Logf("%d calls: %v", n, counts)
	for _, id := range ids {
		if share := float64(counts[id]) / n; share < 0.25 || share > 0.41 {
			t.Errorf("%s got %d of %d calls (%.0f%%), want 25-41%%", id, counts[id], n, share*100)
		}
	}

	// An Envoy announcing the same node.cluster gets the clusters but no
	// API listeners.
	envoy := dialAs(t, h, adsclient.SotW, "apps", nil)
	waitClusters(t, func(n []string) bool { return slices.Contains(n, "echo") }, "cluster echo", envoy)
	if names := envoy.Snapshot().ListenerNames(); len(names) != 0 {
		t.Errorf("an Envoy got listeners %v; API listeners are for gRPC clients only", names)
	}

	// The client is a proxyless gRPC client to the bridge, and in sync.
	p := proxyByNode(proxies(t, h), "grpc-e2e-1")
	if p == nil || !strings.HasPrefix(strings.ToLower(p.UserAgent), "grpc") {
		t.Errorf("/v1/proxies does not show the gRPC client: %+v", p)
	} else if p.Status == serve.StatusNACKed {
		t.Errorf("gRPC client NACKed: %+v", p.Types)
	}

	// Critical: no call reaches echo-2 from (about) the moment Consul knows.
	start := time.Now()
	agent.SetTTL(t, "service:echo-2", "critical")
	lastHit, streak := start, 0
	for streak < 200 || time.Since(lastHit) < time.Second {
		if time.Since(start) > 15*time.Second {
			t.Fatalf("echo-2 still answers calls 15s after its check turned critical")
		}
		id, err := call(c)
		if err != nil {
			t.Fatalf("call while echo-2 turns critical: %v", err)
		}
		if id == "echo-2" {
			lastHit, streak = time.Now(), 0
		} else {
			streak++
		}
	}
	took := lastHit.Sub(start)
	t.Logf("last call to echo-2 answered %v after its check turned critical", took)
	if took > 5*time.Second {
		t.Errorf("echo-2 got calls for %v after turning critical; want under 2s", took)
	}
	counts = callN(t, c, 200)
	if counts["echo-2"] != 0 || counts["echo-1"] == 0 || counts["echo-3"] == 0 {
		t.Errorf("after echo-2 turned critical: %v", counts)
	}

	// Deregistered and gone: calls keep succeeding on the other two,
	// during the change and after it.
	agent.Deregister(t, "echo-2")
	backends["echo-2"].srv.Stop()
	counts = map[string]int{}
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		id, err := call(c)
		if err != nil {
			t.Fatalf("call after echo-2 was deregistered: %v", err)
		}
		counts[id]++
	}
	for id, k := range callN(t, c, 200) {
		counts[id] += k
	}
	t.Logf("calls after deregistration: %v", counts)
	if counts["echo-2"] != 0 || counts["echo-1"] == 0 || counts["echo-3"] == 0 || len(counts) != 2 {
		t.Errorf("after echo-2 was deregistered: %v", counts)
	}

	// No healthy instance: calls fail (Unavailable), and succeed again
	// once one instance recovers.
	agent.SetTTL(t, "service:echo-1", "critical")
	agent.SetTTL(t, "service:echo-3", "critical")
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err = call(c); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("calls still succeed 10s after every instance turned critical")
		}
	}
	t.Logf("with no healthy instance: %v", err)
	if status.Code(err) != codes.Unavailable {
		t.Errorf("call with no healthy instance: %v; want Unavailable", err)
	}
	start = time.Now()
	agent.SetTTL(t, "service:echo-3", "passing")
	for {
		id, err := call(c)
		if err == nil && id == "echo-3" {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no call succeeded within 10s of echo-3 recovering; last: %q, %v", id, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("calls succeed again %v after echo-3 recovered", time.Since(start).Round(time.Millisecond))
	if counts := callN(t, c, 50); counts["echo-3"] != 50 {
		t.Errorf("after echo-3 recovered: %v; want every call on echo-3", counts)
	}
}

const grpcPolicy = `
service "echo" {
  subset "v1" {
    tags = ["v1"]
  }
  subset "v2" {
    tags = ["v2"]
  }
}

# xds:///echo: a canary split between the subsets, 4:1 (served to gRPC
# as 80/20: C-core NACKs weights that do not sum to 100).
grpc_service "echo" {
  route {
    split {
      service = "echo"
      subset  = "v1"
      weight  = 4
    }
    split {
      service = "echo"
      subset  = "v2"
      weight  = 1
    }
  }
}

# xds:///echo-canary: marked calls to v2, the rest to v1. (Header
# matches are served to gRPC with HeaderMatcher's original fields.)
grpc_service "echo-canary" {
  route {
    match {
      header "x-canary" {
        exact = "1"
      }
    }
    service = "echo"
    subset  = "v2"
  }
  route {
    match {
      header "x-tier" {
        regex = "gold|platinum"
      }
    }
    service = "echo"
    subset  = "v2"
  }
  route {
    service = "echo"
    subset  = "v1"
  }
}

# xds:///echo-slow: calls get a 300ms deadline.
grpc_service "echo-slow" {
  route {
    service = "echo"
    timeout = "300ms"
  }
}

# xds:///echo-broken: every call aborted. (grpc-go runs fault delays
# before it applies the route's deadline, so a delay is not bounded by it.)
grpc_service "echo-broken" {
  route {
    service = "echo"
    fault {
      abort {
        status  = 503
        percent = 100
      }
    }
  }
}

# xds:///echo-flaky: a call that fails UNAVAILABLE is tried again.
grpc_service "echo-flaky" {
  route {
    service = "echo"
    retry {
      attempts = 2
      on       = ["unavailable"]
    }
  }
}

# xds:///echo-delayed: every call held 300ms by the client (gRFC A33).
grpc_service "echo-delayed" {
  route {
    service = "echo"
    fault {
      delay {
        duration = "300ms"
        percent  = 100
      }
    }
  }
}

# xds:///echo-path: routed by the call's path (the gRPC method): a route
# for another method comes first, so a client ignoring paths would send
# UnaryCall to v2.
grpc_service "echo-path" {
  route {
    match {
      path_prefix = "/grpc.testing.TestService/EmptyCall"
    }
    service = "echo"
    subset  = "v2"
  }
  route {
    match {
      path = "/grpc.testing.TestService/UnaryCall"
    }
    service = "echo"
    subset  = "v1"
  }
}

# Nodes in these groups are proxyless clients whatever their user agent.
proxy "grpc-*" {
  proxyless = true
}

# xds:///sticky (its default API listener): echo, by ring hash on x-user.
service "sticky" {
  consul_service = "echo"
  lb_policy      = "ring_hash"
  hash_policy {
    header = "x-user"
  }
}
`

// TestProxylessGRPCPolicy: grpc_service routes reach real gRPC clients,
// grpc-go and grpc-node: a weighted split, header routes, a deadline
// (max_stream_duration), fault injection and ring hash on a header.
func TestProxylessGRPCPolicy(t *testing.T) {
	agent := consultest.Start(t)
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	tags := map[string][]string{"echo-1": {"v1"}, "echo-2": {"v1"}, "echo-3": {"v2"}}
	startEchoBackends(t, agent, "echo", tags, "echo-1", "echo-2", "echo-3")
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte(grpcPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startBridgeWith(t, agent, fwd, func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
	})

	t.Run("proxyless group", func(t *testing.T) {
		// A node that does not announce itself as gRPC, in a group
		// declared proxyless, gets the API listeners (here all of them:
		// the test client asks for every listener).
		c := dialAs(t, h, adsclient.SotW, "grpc-frontend", nil)
		want := []string{"echo", "echo-broken", "echo-canary", "echo-delayed", "echo-flaky", "echo-path", "echo-slow", "sticky"}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if _, err := c.Wait(ctx, func(s adsclient.State) bool { return slices.Equal(s.ListenerNames(), want) }); err != nil {
			t.Fatalf("listeners of a proxyless-group node = %v, want %v: %v", c.Snapshot().ListenerNames(), want, err)
		}
		if l := c.Snapshot().Listener("echo-canary"); l.GetApiListener() == nil {
			t.Errorf("echo-canary is not an API listener: %v", l)
		}
	})
	forEachImpl(t, func(t *testing.T, impl grpcImpl) { testProxylessGRPCPolicy(t, impl, h) })
}

func testProxylessGRPCPolicy(t *testing.T, impl grpcImpl, h *harness) {
	agent := h.agent
	node := func(name string) string { return impl.name + "-" + name }
	t.Run("split 4:1", func(t *testing.T) {
		c := dialXDS(t, impl, h, node("split"), "apps", "xds:///echo")
		warmUp(t, c, "echo-1", "echo-2", "echo-3")
		const n = 1000
		counts := callN(t, c, n)
		share := float64(counts["echo-3"]) / n
		t.Logf("%d calls: %v; v2 share %.1f%%", n, counts, share*100)
		if share < 0.15 || share > 0.25 {
			t.Errorf("v2 got %.1f%% of calls, want 15-25%%", share*100)
		}
	})

	t.Run("header route", func(t *testing.T) {
		c := dialXDS(t, impl, h, node("canary"), "apps", "xds:///echo-canary")
		warmUp(t, c, "echo-1", "echo-2")
		marked := callN(t, c, 200, "x-canary", "1")
		tiered := callN(t, c, 100, "x-tier", "platinum")
		unmarked := callN(t, c, 200, "x-tier", "silver")
		t.Logf("marked: %v; platinum: %v; unmarked (silver): %v", marked, tiered, unmarked)
		if marked["echo-3"] != 200 {
			t.Errorf("marked calls: %v, want all 200 on v2 (echo-3)", marked)
		}
		if tiered["echo-3"] != 100 {
			t.Errorf("calls with x-tier: platinum (regex gold|platinum): %v, want all 100 on v2 (echo-3)", tiered)
		}
		if unmarked["echo-3"] != 0 || unmarked["echo-1"] == 0 || unmarked["echo-2"] == 0 {
			t.Errorf("unmarked calls: %v, want none on v2 and both v1 instances used", unmarked)
		}
	})

	t.Run("deadline from max_stream_duration", func(t *testing.T) {
		c := dialXDS(t, impl, h, node("slow"), "apps", "xds:///echo-slow")
		warmUp(t, c, "echo-1", "echo-2", "echo-3")
		if _, err := call(c, "x-sleep", "100ms"); err != nil {
			t.Fatalf("a call within the route's deadline: %v", err)
		}
		// The client's own deadline (5s) is far above the route's.
		start := time.Now()
		_, err := call(c, "x-sleep", "3s")
		took := time.Since(start)
		t.Logf("a 3s call on a route with timeout 300ms: %v after %v", err, took)
		// The route's deadline travels as grpc-timeout, so the server's
		// deadline fires at the same moment as the client's: grpc-node
		// reports Canceled when the server's RST_STREAM wins that race
		// (its timers run late on a loaded machine). Either way the call
		// ended at the route's 300ms, not the caller's 3s.
		code := status.Code(err)
		if (code != codes.DeadlineExceeded && code != codes.Canceled) || took < 250*time.Millisecond || took > 2*time.Second {
			t.Errorf("got %v after %v; want DeadlineExceeded after about 300ms", err, took)
		}
	})

	// The retry policy is the client's to apply (gRFC A44): a call whose
	// first attempt fails UNAVAILABLE succeeds on xds:///echo-flaky, and
	// fails on xds:///echo, which has none.
	t.Run("retry on unavailable", func(t *testing.T) {
		flaky := dialXDS(t, impl, h, node("flaky"), "apps", "xds:///echo-flaky")
		warmUp(t, flaky, "echo-1", "echo-2", "echo-3")
		if id, err := call(flaky, "x-fail-once", impl.name+"-retried"); err != nil {
			t.Errorf("a call failing once on a route with retries: %v, want it retried", err)
		} else {
			t.Logf("retried call answered by %s", id)
		}
		plain := dialXDS(t, impl, h, node("plain"), "apps", "xds:///echo")
		warmUp(t, plain, "echo-1", "echo-2", "echo-3")
		if _, err := call(plain, "x-fail-once", impl.name+"-not-retried"); status.Code(err) != codes.Unavailable {
			t.Errorf("a call failing once on a route without retries: %v, want Unavailable (not retried)", err)
		}
	})

	// A fault delay is the client's to apply too: each call on
	// xds:///echo-delayed takes the route's 300ms, and one on xds:///echo
	// does not.
	t.Run("fault delay", func(t *testing.T) {
		c := dialXDS(t, impl, h, node("delayed"), "apps", "xds:///echo-delayed")
		warmUp(t, c, "echo-1", "echo-2", "echo-3")
		for range 3 {
			start := time.Now()
			if _, err := call(c); err != nil {
				t.Fatalf("a delayed call: %v", err)
			}
			if took := time.Since(start); took < 280*time.Millisecond {
				t.Errorf("a call on a route with a 300ms fault delay took %v", took)
			}
		}
		plain := dialXDS(t, impl, h, node("undelayed"), "apps", "xds:///echo")
		warmUp(t, plain, "echo-1", "echo-2", "echo-3")
		start := time.Now()
		if _, err := call(plain); err != nil || time.Since(start) >= 280*time.Millisecond {
			t.Errorf("a call on a route without a delay: %v after %v", err, time.Since(start))
		}
	})

	t.Run("path match", func(t *testing.T) {
		c := dialXDS(t, impl, h, node("path"), "apps", "xds:///echo-path")
		warmUp(t, c, "echo-1", "echo-2")
		if counts := callN(t, c, 50); counts["echo-3"] != 0 || counts["echo-1"]+counts["echo-2"] != 50 {
			t.Errorf("UnaryCall on xds:///echo-path: %v, want all 50 on v1 (the route matching its path), none on v2", counts)
		}
	})

	t.Run("fault abort", func(t *testing.T) {
		c := dialXDS(t, impl, h, node("broken"), "apps", "xds:///echo-broken")
		var err error
		for range 20 {
			if _, err = call(c); status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), impl.faultText) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), impl.faultText) {
			t.Errorf("got %v; want Unavailable from fault injection (HTTP 503)", err)
		}
	})

	t.Run("ring hash on a header", func(t *testing.T) {
		c := dialXDS(t, impl, h, node("sticky"), "apps", "xds:///sticky")
		if _, err := call(c, "x-user", "warm-up"); err != nil {
			t.Fatal(err)
		}
		used := map[string]bool{}
		for u := range 30 {
			user := fmt.Sprintf("user-%d", u)
			counts := callN(t, c, 10, "x-user", user)
			if len(counts) != 1 {
				t.Errorf("calls of %s spread over %v; want one instance", user, counts)
			}
			for id := range counts {
				used[id] = true
			}
		}
		t.Logf("30 users hashed onto %v", slices.Sorted(maps.Keys(used)))
		if len(used) < 2 {
			t.Errorf("30 users all hashed onto %v", used)
		}
	})

	t.Run("flip in one subset keeps the other's endpoints", func(t *testing.T) {
		// SotW EDS responses carry only the ClusterLoadAssignments that
		// changed: grpc-go must keep the v2 subset's endpoints when a v1
		// instance turns critical and only v1's assignments are sent.
		c := dialXDS(t, impl, h, node("subsets"), "apps", "xds:///echo")
		warmUp(t, c, "echo-1", "echo-2", "echo-3")
		agent.SetTTL(t, "service:echo-1", "critical")
		defer agent.SetTTL(t, "service:echo-1", "passing")
		deadline := time.Now().Add(15 * time.Second)
		for {
			counts := callN(t, c, 200)
			if counts["echo-1"] == 0 {
				t.Logf("after echo-1 turned critical: %v", counts)
				if counts["echo-3"] == 0 || counts["echo-2"] == 0 {
					t.Errorf("calls after a v1 flip: %v; want both echo-2 (v1) and echo-3 (v2) still used", counts)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("echo-1 still answers 15s after its check turned critical: %v", counts)
			}
		}
	})
}

// TestProxylessGRPCNACK, with each client: a policy gRPC rejects
// (lb_policy "random") is NACKed by the real client, /v1/proxies shows the
// NACK with the client's error text, and the client keeps calling with its
// last good config.
func TestProxylessGRPCNACK(t *testing.T) {
	forEachImpl(t, testProxylessGRPCNACK)
}

func testProxylessGRPCNACK(t *testing.T, impl grpcImpl) {
	agent := consultest.Start(t)
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	ids := []string{"echo-1", "echo-2", "echo-3"}
	startEchoBackends(t, agent, "echo", nil, ids...)
	file := filepath.Join(t.TempDir(), "policy.hcl")
	write := func(lb string) {
		t.Helper()
		if err := os.WriteFile(file, []byte("service \"echo\" {\n  lb_policy = \""+lb+"\"\n}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("round_robin")
	h := startBridgeWith(t, agent, fwd, func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
	})
	c := dialXDSAllowingNACK(t, impl, h, "grpc-nack", "apps", "xds:///echo")
	warmUp(t, c, ids...)

	write("random")
	h.daemon.Reload()
	var nack *serve.NACKInfo
	deadline := time.Now().Add(15 * time.Second)
	for nack == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no NACK on /v1/proxies within 15s: %+v", proxyByNode(proxies(t, h), "grpc-nack"))
		}
		// Calls keep succeeding while the bad cluster is pushed.
		if _, err := call(c); err != nil {
			t.Fatalf("call after the bad policy: %v", err)
		}
		if p := proxyByNode(proxies(t, h), "grpc-nack"); p != nil && p.Types["CDS"] != nil && p.Types["CDS"].LastNACK != nil {
			if p.Types["CDS"].Status != serve.StatusNACKed || p.Status != serve.StatusNACKed {
				t.Errorf("NACK recorded but statuses are CDS %s, proxy %s", p.Types["CDS"].Status, p.Status)
			}
			nack = p.Types["CDS"].LastNACK
			if acked := p.Types["CDS"].VersionAcked; acked == "" || acked == nack.Version {
				t.Errorf("CDS version ACKed %q after NACKing %q; want the last good version still held", acked, nack.Version)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	text := nack.Error
	if len(text) > 300 {
		text = text[:300] + "..."
	}
	t.Logf("NACK of version %s: %s", nack.Version, text)
	if !strings.Contains(nack.Error, impl.randomNACK) {
		t.Errorf("NACK text does not carry %s's reason (%s): %s", impl.name, impl.randomNACK, nack.Error)
	}
	counts := callN(t, c, 150)
	t.Logf("calls after the NACK: %v", counts)
	if len(counts) != 3 {
		t.Errorf("after the NACK calls reached %v; want all three instances, round robin as before", counts)
	}
}
