package bridge_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestProxylessLeastRequestFallback (issue 39, item 6): a service with
// lb_policy = "least_request" is callable by grpc-go and by grpc-node
// (which NACKs lb_policy LEAST_REQUEST) through xds:///echo, with no NACK
// on /v1/proxies (dialXDS checks it): they get the copy grpc:echo
// (round_robin, gRFC A52's [least_request, round_robin]); an Envoy of a
// group routing to echo keeps least_request; /v1/policy warns.
func TestProxylessLeastRequestFallback(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl grpcImpl) {
		agent := consultest.Start(t)
		ids := []string{"echo-1", "echo-2", "echo-3"}
		startEchoBackends(t, agent, "echo", nil, ids...)
		file := filepath.Join(t.TempDir(), "policy.hcl")
		src := `service "echo" {
  lb_policy = "least_request"
}
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      domains = ["*"]
      route {
        service = "echo"
      }
    }
  }
}
proxy "grpc-*" {
  proxyless = true
}
`
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
			c.ConfigFiles = []string{file}
			c.Policy = loadPolicy(t, file)
		})
		c := dialXDS(t, impl, h, "grpc-lr", "grpc-apps", "xds:///echo")
		warmUp(t, c, ids...)
		counts := callN(t, c, 60)
		t.Logf("%s: %v", impl.name, counts)
		if len(counts) != 3 {
			t.Errorf("calls reached %v, want all three instances", counts)
		}
		if p := proxyByNode(proxies(t, h), "grpc-lr"); p == nil || p.Types["CDS"] == nil || p.Types["CDS"].VersionAcked == "" {
			t.Errorf("/v1/proxies shows no CDS ACK from %s: %+v", impl.name, p)
		}
		// The Envoy's cluster is the policy's.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e, err := adsclient.Dial(ctx, adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: "edge-1", Cluster: "edge"})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		st, err := e.Wait(ctx, func(s adsclient.State) bool { return s.Cluster("echo") != nil })
		if err != nil {
			t.Fatal(err)
		}
		if lb := st.Cluster("echo").GetLbPolicy(); lb != clusterv3.Cluster_LEAST_REQUEST || st.Cluster("grpc:echo") != nil {
			t.Errorf("Envoy gets echo with %v and grpc:echo %v; want least_request and no gRPC copy", lb, st.Cluster("grpc:echo") != nil)
		}
		// A reload reads the files as the daemon does, with diagnostics.
		h.daemon.Reload()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			ws := strings.Join(h.daemon.Policy().PolicyWarnings, "\n")
			if strings.Contains(ws, "least_request falls back to round_robin") && strings.Contains(ws, "grpc:echo") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/v1/policy lacks the fallback warning:\n%s", ws)
			}
		}
	})
}
