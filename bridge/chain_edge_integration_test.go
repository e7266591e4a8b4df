package bridge_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

const edgeChainHCL = `proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "shop" {
      domains = ["*"]
      route {
        match {
          path_prefix = "/raw/"
        }
        service = "api"
        chain   = false
      }
      route {
        service = "api"
      }
    }
  }
}
`

// TestEdgeRouteFollowsChain (issue 39): with consul.config_entries, an
// edge listener's route { service = "api" } follows the chain in Consul's
// entries, as Consul's own gateways do: the router's header route to the
// v2 subset (2 s), then the splitter's 90/10 over v1 and v2, each subset
// cluster's endpoints the instance with its tag; the route that says
// chain = false goes to every instance; /v1/policy shows the warning
// naming the chain and the opt-out.
func TestEdgeRouteFollowsChain(t *testing.T) {
	agent := consultest.Start(t)
	registerCanary(t, agent)
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte(edgeChainHCL), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
		c.Settings.Consul.ConfigEntries = true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: "edge-1", Cluster: "edge"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	want := []string{
		"[] -> api=1 timeout 0s",
		"[x-canary=1] -> api.v2=1 timeout 2s",
		"[] -> api.v1=0.90,api.v2=0.10 timeout 0s",
	}
	routes := func(s adsclient.State) []string {
		rc := s.RouteConfig("edge.http")
		var out []string
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				out = append(out, routeView(r))
			}
		}
		return out
	}
	st, err := c.Wait(ctx, func(s adsclient.State) bool {
		return slices.Equal(routes(s), want) && len(s.Endpoints("api.v1")) > 0 && len(s.Endpoints("api.v2")) > 0
	})
	if err != nil {
		t.Fatalf("edge routes %q, want %q: %v", routes(c.Snapshot()), want, err)
	}
	for cluster, port := range map[string]int{"api.v1": 9090, "api.v2": 9092} {
		eps := st.Endpoints(cluster)
		if len(eps) != 1 || !strings.HasSuffix(eps[0].Address, fmt.Sprintf(":%d", port)) {
			t.Errorf("%s endpoints %+v, want the instance on port %d", cluster, eps, port)
		}
	}
	if len(st.Endpoints("api")) != 2 {
		t.Errorf("the opted-out route's cluster api has endpoints %+v, want both instances", st.Endpoints("api"))
	}
	ws := strings.Join(h.daemon.Policy().PolicyWarnings, "\n")
	if !strings.Contains(ws, "Route follows the discovery chain") || !strings.Contains(ws, `chain of "api"`) {
		t.Errorf("/v1/policy warnings lack the chain applied to the edge route:\n%s", ws)
	}
}
