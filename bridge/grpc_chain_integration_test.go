package bridge_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// TestProxylessFollowsTheChain (issue 39): gRPC clients dialing
// xds:///echo, whose chain comes from config entries (resolver subsets
// v1/v2 with default subset v1, a router sending x-canary: 1 to v2) and
// which no grpc_service names, follow the chain as sidecars do: grpc-go
// and grpc-node both send plain calls to v1's instances only and canary
// calls to v2's only, with no NACK.
func TestProxylessFollowsTheChain(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl grpcImpl) {
		agent := consultest.Start(t)
		tags := map[string][]string{"echo-1": {"v1"}, "echo-2": {"v1"}, "echo-3": {"v2"}}
		startEchoBackends(t, agent, "echo", tags, "echo-1", "echo-2", "echo-3")
		for _, e := range []api.ConfigEntry{
			&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "echo", Protocol: "http2"},
			&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "echo", DefaultSubset: "v1",
				Subsets: map[string]api.ServiceResolverSubset{"v1": {Filter: `"v1" in Service.Tags`}, "v2": {Filter: `"v2" in Service.Tags`}}},
			&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "echo", Routes: []api.ServiceRoute{{
				Match:       &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{Header: []api.ServiceRouteHTTPMatchHeader{{Name: "x-canary", Exact: "1"}}}},
				Destination: &api.ServiceRouteDestination{ServiceSubset: "v2"},
			}}},
		} {
			if _, _, err := agent.Client().ConfigEntries().Set(e, nil); err != nil {
				t.Fatalf("write %s/%s: %v", e.GetKind(), e.GetName(), err)
			}
		}
		file := filepath.Join(t.TempDir(), "policy.hcl")
		if err := os.WriteFile(file, []byte("proxy \"grpc-*\" {\n  proxyless = true\n}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
			c.ConfigFiles = []string{file}
			c.Policy = loadPolicy(t, file)
			c.Settings.Consul.ConfigEntries = true
		})
		c := dialXDS(t, impl, h, "grpc-chain", "grpc-apps", "xds:///echo")
		warmUp(t, c, "echo-1", "echo-2")
		// The client may get its routes twice: in CI the bridge's log showed
		// a second build, triggered by the config entries, after the client
		// connected, and a call made while grpc-go swaps its routes failed
		// ("unknown cluster selected for RPC"). The counted calls start
		// once a canary call has reached v2.
		warmUpWith(t, c, []string{"x-canary", "1"}, "echo-3")
		plain, canary := callN(t, c, 40), callN(t, c, 20, "x-canary", "1")
		t.Logf("%s: plain %v, canary %v", impl.name, plain, canary)
		if got := slices.Sorted(maps.Keys(plain)); strings.Join(got, ",") != "echo-1,echo-2" {
			t.Errorf("plain calls reached %v, want v1's instances echo-1 and echo-2 only", plain)
		}
		if got := slices.Sorted(maps.Keys(canary)); strings.Join(got, ",") != "echo-3" {
			t.Errorf("canary calls reached %v, want v2's instance echo-3 only", canary)
		}
	})
}
