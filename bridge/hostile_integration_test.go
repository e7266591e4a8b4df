package bridge_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/hashicorp/consul/api"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestHostileInputKeepsHealthFlowing runs the hostile and odd inputs of
// issue 14 one after another against one bridge on a real Consul, with a
// well-behaved proxy connected throughout. After each, that proxy must
// still receive a health flip within 1s of the Consul write.
func TestHostileInputKeepsHealthFlowing(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, []string{"v1"}, nil)
	const prefix = "xds-bridge/policy/"
	kv := agent.Client().KV()
	put := func(t *testing.T, key, val string) {
		t.Helper()
		if _, err := kv.Put(&api.KVPair{Key: prefix + key, Value: []byte(val)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	del := func(t *testing.T, key string) {
		t.Helper()
		if _, err := kv.Delete(prefix+key, nil); err != nil {
			t.Fatal(err)
		}
	}
	put(t, "base.hcl", `service "web" {
  subset "v2" {
    tags = ["v2"]
  }
}
`)
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte("export_all_services = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	h := startBridgeWith(t, agent, fwd, func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
		c.Settings.Consul.KVPrefix = prefix
	})
	good := dial(t, h, adsclient.Delta, nil)
	waitEndpoints(t, "web", ep(1001, "HEALTHY"), good)

	healthy := true
	flip := func(t *testing.T) {
		t.Helper()
		state, want := "critical", ep(1001, "UNHEALTHY")
		if !healthy {
			state, want = "passing", ep(1001, "HEALTHY")
		}
		healthy = !healthy
		start := time.Now()
		agent.SetTTL(t, "service:web-1", state)
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		web1 := func(s adsclient.State) string {
			for _, e := range s.Endpoints("web") {
				if strings.HasSuffix(e.Address, ":1001") {
					return summary([]adsclient.Endpoint{e})
				}
			}
			return ""
		}
		if _, err := good.Wait(ctx, func(s adsclient.State) bool { return web1(s) == want }); err != nil {
			t.Fatalf("the proxy connected throughout never saw the health flip: %v", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("health flip took %v to reach the proxy connected throughout, want within 1s", took)
		} else {
			t.Logf("health flip reached the proxy in %v", took)
		}
	}
	lastError := func() string {
		if e := h.daemon.Policy().LastError; e != nil {
			return strings.Join(e.Diagnostics, "; ")
		}
		return ""
	}
	// waitFor bounds waits generously: five slow documents are parsed one
	// after another (each ~3 s of one core, more on a loaded machine)
	// before their rejection shows; flips are what must be fast.
	waitFor := func(t *testing.T, what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	conn, err := grpc.NewClient(h.daemon.XDSAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	// refused sends reqs on one stream and returns how it ended.
	refused := func(t *testing.T, reqs ...*discoveryv3.DiscoveryRequest) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		st, err := ads.StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for _, r := range reqs {
				if st.Send(r) != nil {
					return
				}
			}
		}()
		for {
			if _, err := st.Recv(); err != nil {
				return err
			}
		}
	}
	wantInvalid := func(t *testing.T, err error, why string) {
		t.Helper()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), why) {
			t.Fatalf("stream ended with %v, want InvalidArgument saying %q", err, why)
		}
	}

	t.Run("deeply nested KV document", func(t *testing.T) {
		put(t, "deep.hcl", "a = "+strings.Repeat("[", 60_000)+strings.Repeat("]", 60_000)+"\n")
		waitFor(t, "the nested document's rejection", func() bool { return strings.Contains(lastError(), prefix+"deep.hcl") })
		flip(t)
		del(t, "deep.hcl")
	})

	t.Run("slow-to-parse KV documents", func(t *testing.T) {
		doc := strings.Repeat("a = <<EOT\n%{if x}\n", 480_000/18)
		for i := range 5 {
			put(t, fmt.Sprintf("slow-%d.hcl", i), doc)
		}
		put(t, "touch.hcl", "# a benign write while they parse\n")
		flip(t)
		put(t, "touch.hcl", "# and another\n")
		flip(t)
		waitFor(t, "the slow documents' rejection", func() bool {
			return strings.Contains(lastError(), prefix+"slow-") && strings.Contains(lastError(), "too long to parse")
		})
		for i := range 5 {
			del(t, fmt.Sprintf("slow-%d.hcl", i))
		}
		flip(t)
	})

	t.Run("service names Consul cannot query", func(t *testing.T) {
		for _, name := range []string{"bad\tname", ".."} {
			if err := agent.Client().Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "odd-" + fmt.Sprint(len(name)), Name: name, Address: "127.0.0.1", Port: 6666}); err != nil {
				t.Fatal(err)
			}
		}
		flip(t)
		flip(t)
	})

	t.Run("a service named like a subset cluster", func(t *testing.T) {
		agent.RegisterTTL(t, "web", "web-2", 1002, []string{"v2"}, nil)
		waitEndpoints(t, "web.v2", ep(1002, "HEALTHY"), good)
		agent.RegisterTTL(t, "web.v2", "attacker", 6667, nil, nil)
		flip(t)
		if got := summary(good.Snapshot().Endpoints("web.v2")); strings.Contains(got, "6667") {
			t.Fatalf("cluster web.v2 took the look-alike service's endpoints: %s", got)
		}
		agent.Deregister(t, "attacker")
		agent.Deregister(t, "web-2")
	})

	t.Run("zone-scoped IPv6 instance", func(t *testing.T) {
		if err := agent.Client().Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-zone", Name: "web", Address: "fe80::1%eth0", Port: 1003}); err != nil {
			t.Fatal(err)
		}
		flip(t)
		if got := summary(good.Snapshot().Endpoints("web")); strings.Contains(got, "fe80") {
			t.Fatalf("a zone-scoped address was served: %s", got)
		}
		agent.Deregister(t, "web-zone")
	})

	t.Run("silent streams", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for range 300 {
			if _, err := ads.StreamAggregatedResources(ctx); err != nil {
				t.Fatal(err)
			}
		}
		late := dial(t, h, adsclient.SotW, nil)
		waitEndpoints(t, "web", summary(good.Snapshot().Endpoints("web")), late)
		flip(t)
	})

	t.Run("identity changing within a stream", func(t *testing.T) {
		// 1 MiB node.cluster values are over the node bound already;
		// smaller ones meet the rule that a stream is one proxy.
		for _, size := range []int{1 << 20, 10 << 10} {
			var reqs []*discoveryv3.DiscoveryRequest
			for i := range 300 {
				reqs = append(reqs, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "shifty", Cluster: fmt.Sprintf("%d-%s", i, strings.Repeat("c", size))}, TypeUrl: resourcev3.ClusterType})
			}
			why := "over the limit"
			if size < 64<<10 {
				why = "within a stream"
			}
			wantInvalid(t, refused(t, reqs...), why)
		}
		flip(t)
	})

	t.Run("huge node metadata", func(t *testing.T) {
		meta, _ := structpb.NewStruct(map[string]any{"junk": strings.Repeat("m", 3_500_000)})
		wantInvalid(t, refused(t, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "fat", Cluster: "edge", Metadata: meta}, TypeUrl: resourcev3.ClusterType}), "over the limit")
		flip(t)
	})

	t.Run("garbage type URLs", func(t *testing.T) {
		node := &corev3.Node{Id: "junk", Cluster: "edge"}
		var reqs []*discoveryv3.DiscoveryRequest
		for i := range 300 {
			reqs = append(reqs, &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: fmt.Sprintf("type.googleapis.com/%d%s", i, strings.Repeat("t", 1<<20))})
		}
		wantInvalid(t, refused(t, reqs...), "type URL")
		flip(t)
	})

	t.Run("huge NACK texts", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		st, err := ads.StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "nacker", Cluster: "edge"}, TypeUrl: resourcev3.ClusterType}); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for range 40 {
			if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: resp.GetNonce(), VersionInfo: "old",
				ErrorDetail: &rpcstatus.Status{Message: strings.Repeat("e", 3_500_000)}}); err != nil {
				t.Fatal(err)
			}
		}
		var shown int
		waitFor(t, "the NACK on /v1/proxies", func() bool {
			for _, p := range proxies(t, h) {
				if p.NodeID == "nacker" && p.Types["CDS"] != nil && p.Types["CDS"].LastNACK != nil {
					shown = len(p.Types["CDS"].LastNACK.Error)
					return true
				}
			}
			return false
		})
		if shown > 5<<10 {
			t.Fatalf("/v1/proxies shows %d bytes of one NACK's text, want it cut at 4 KiB", shown)
		}
		flip(t)
	})
}
