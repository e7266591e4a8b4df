package agent_test

import (
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestAgentHonoursConsulEnvironment: with no consul_address, the agent
// reaches the Consul agent CONSUL_HTTP_ADDR names, as the bridge daemon
// and Consul's own tools do (it used to take 127.0.0.1:8500 whatever the
// environment said): here it finds the central bridge among that
// Consul's passing instances and relays its world.
func TestAgentHonoursConsulEnvironment(t *testing.T) {
	ca := consultest.Start(t)
	ca.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	startCentral(t, ca.HTTPAddr(), freeAddr(t), func(s *policy.Settings) { s.Consul.Register = &policy.RegisterSettings{Name: "xds-env"} })
	deadline := time.Now().Add(20 * time.Second)
	for {
		entries, _, err := ca.Client().Health().Service("xds-env", "", true, nil)
		if err == nil && len(entries) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the central bridge did not register as passing: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Setenv("CONSUL_HTTP_ADDR", ca.HTTPAddr())
	// The Consul address as a configuration file without consul_address
	// gives it.
	parsed, diags := agent.ParseConfig("agent.hcl", []byte("allow_groups = [\"web\"]\nupstream {\n  consul_service = \"xds-env\"\n}\n"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	ag := startAgentWith(t, t.TempDir(), func(c *agent.Config) {
		c.Upstreams, c.ConsulService, c.ConsulAddress = nil, parsed.ConsulService, parsed.ConsulAddress
	})
	proxy := dial(t, "unix://"+ag.SocketAddr().String(), "web", adsclient.Delta)
	wait(t, proxy, "web endpoints through the replica found in CONSUL_HTTP_ADDR's Consul", 20*time.Second, func(s adsclient.State) bool { return health(s, "web") == "127.0.0.1:1001=HEALTHY" })
}
