package bridge_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestFollowedServicesKeepTheirSlots: with more watched services than
// query slots (consul.max_queries 6: the hint view's and 5 for 10
// services), the service the connected edge proxy's routes reach keeps a
// slot of its own (consul_xds_bridge_consul_queries_own_slot), and gives
// it back once the proxy leaves: what a connected proxy follows is the
// xDS server's, mapped to Consul services through the last world.
func TestFollowedServicesKeepTheirSlots(t *testing.T) {
	agent := consultest.Start(t)
	for i := range 9 {
		agent.RegisterTTL(t, fmt.Sprintf("bg%d", i), fmt.Sprintf("bg%d-1", i), 3000+i, nil, nil)
	}
	agent.RegisterTTL(t, "api", "api-1", 2001, nil, nil)
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte(`export_all_services = true
unmatched_nodes = "all" # served to no stream here: not followed
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "api" {
      domains = ["api.example.com"]
      route {
        service = "api"
      }
    }
  }
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.Settings.Consul.MaxQueries = 6
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
	})
	base := "http://" + h.daemon.AdminAddr().String()
	ownSlots := func() float64 {
		code, body := get(t, base+"/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics = %d", code)
		}
		return metricValue(body, "consul_xds_bridge_consul_queries_own_slot")
	}
	waitOwn := func(want float64, why string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for ownSlots() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: consul_xds_bridge_consul_queries_own_slot = %v, want %v", why, ownSlots(), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	time.Sleep(2 * time.Second) // a refresh or two with nobody connected
	waitOwn(0, "no proxy connected")

	edge := dialAs(t, h, adsclient.Delta, "edge", nil)
	waitOwn(1, "the edge proxy follows api")
	edge.Close()
	waitOwn(0, "the edge proxy left")
}
