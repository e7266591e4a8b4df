package bridge_test

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// invertHCL: a case-insensitive path_prefix (the method is
// /grpc.testing.TestService/UnaryCall) with an inverted header match sends
// calls whose x-env is not "canary" to v1, the rest to v2.
const invertHCL = `service "echo" {
  subset "v1" {
    tags = ["v1"]
  }
  subset "v2" {
    tags = ["v2"]
  }
}
grpc_service "echo" {
  route {
    match {
      path_prefix    = "/GRPC.TESTING.testservice/"
      case_sensitive = false
      header "x-env" {
        exact  = "canary"
        invert = true
      }
    }
    service = "echo"
    subset  = "v1"
  }
  route {
    service = "echo"
    subset  = "v2"
  }
}
`

// TestProxylessInvertedHeaderRoute (issue 39, item 7): grpc-go and
// grpc-node route alike on the inverted header route: a call without
// x-env matches it in neither (gRFC A28 as both implement it: an absent
// header fails the value match before inversion) and goes to v2, as the
// bridge serves it to every implementation (a present match first);
// x-env: prod goes to v1, x-env: canary to v2. No NACK (dialXDS).
func TestProxylessInvertedHeaderRoute(t *testing.T) {
	want := map[string]map[string]int{
		"none":   {"echo-2": 40},
		"prod":   {"echo-1": 40},
		"canary": {"echo-2": 40},
	}
	forEachImpl(t, func(t *testing.T, impl grpcImpl) {
		agent := consultest.Start(t)
		startEchoBackends(t, agent, "echo", map[string][]string{"echo-1": {"v1"}, "echo-2": {"v2"}}, "echo-1", "echo-2")
		file := filepath.Join(t.TempDir(), "policy.hcl")
		if err := os.WriteFile(file, []byte(invertHCL), 0o644); err != nil {
			t.Fatal(err)
		}
		h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
			c.ConfigFiles = []string{file}
			c.Policy = loadPolicy(t, file)
		})
		c := dialXDS(t, impl, h, "grpc-invert", "apps", "xds:///echo")
		warmUp(t, c, "echo-2")
		for name, md := range map[string][]string{"none": nil, "prod": {"x-env", "prod"}, "canary": {"x-env", "canary"}} {
			got := callN(t, c, 40, md...)
			t.Logf("%s, x-env %s: %v", impl.name, name, got)
			if !maps.Equal(got, want[name]) {
				t.Errorf("%s: x-env %s reached %v, want %v", impl.name, name, got, want[name])
			}
		}
	})
}
