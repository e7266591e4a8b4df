package bridge_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestReplicasServeIdenticalVersions: two bridges on the same Consul, with
// the same policy, serve the same version for every resource type, before
// and after a change, because versions are content hashes. This is what
// lets several replicas sit behind one DNS name (docs/scaling.md): an Envoy
// that reconnects to another replica finds the versions it already holds
// and gets no push.
func TestReplicasServeIdenticalVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	agent := consultest.Start(t)
	for i := 1; i <= 3; i++ {
		agent.RegisterTTL(t, "web", fmt.Sprintf("web-%d", i), 1000+i, nil, nil)
		agent.RegisterTTL(t, "api", fmt.Sprintf("api-%d", i), 2000+i, []string{"v2"}, nil)
	}
	file := filepath.Join(t.TempDir(), "policy.hcl")
	src := `export_all_services = true
service "api" {
  subset "v2" { tags = ["v2"] }
}
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        match {
          path_prefix = "/api/"
        }
        service = "api"
      }
      route {
        service = "web"
      }
    }
  }
}
`
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var clients [2]*adsclient.Client
	for i := range clients {
		fwd := consultest.NewForwarder(t, agent.HTTPAddr())
		h := startBridgeWith(t, agent, fwd, func(c *bridge.Config) {
			c.ConfigFiles = []string{file}
			c.Policy = loadPolicy(t, file)
		})
		// One replica serves SotW, the other delta: versions must not
		// depend on the protocol either.
		mode := []adsclient.Mode{adsclient.SotW, adsclient.Delta}[i]
		clients[i] = dialAs(t, h, mode, "edge", nil)
	}
	types := []string{adsclient.ClusterType, adsclient.EndpointType, adsclient.ListenerType, adsclient.RouteType}
	same := func(pred func(adsclient.State) bool) [2]adsclient.State {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var st [2]adsclient.State
		for i, c := range clients {
			var err error
			st[i], err = c.Wait(ctx, func(s adsclient.State) bool {
				for _, typ := range types {
					if s.Version(typ) == "" {
						return false
					}
				}
				return pred(s)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, typ := range types {
			if a, b := st[0].Version(typ), st[1].Version(typ); a != b {
				t.Errorf("%s: replica 1 serves version %q, replica 2 %q", typ, a, b)
			}
		}
		return st
	}
	unhealthy := func(s adsclient.State) bool {
		for _, e := range s.Endpoints("web") {
			if e.Address == "127.0.0.1:1002" {
				return e.Health == "UNHEALTHY"
			}
		}
		return false
	}
	before := same(func(s adsclient.State) bool { return len(s.Endpoints("web")) == 3 && !unhealthy(s) })
	agent.SetTTL(t, "service:web-2", "critical")
	after := same(unhealthy)
	if before[0].Version(adsclient.EndpointType) == after[0].Version(adsclient.EndpointType) {
		t.Error("EDS version did not change with the endpoints")
	}
	for _, typ := range []string{adsclient.ClusterType, adsclient.ListenerType, adsclient.RouteType} {
		if before[0].Version(typ) != after[0].Version(typ) {
			t.Errorf("%s version changed on an endpoint-only change", typ)
		}
	}
}
