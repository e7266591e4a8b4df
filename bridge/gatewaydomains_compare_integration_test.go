package bridge_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// gatewayDomains dials the xDS server at addr as the gateway node and
// returns each route configuration's domains, sorted, keyed by the
// listener port its name ends in (Consul names an ingress route
// configuration by its port, the bridge GROUP.port-PORT).
func gatewayDomains(t *testing.T, addr, node string, wantRoutes int) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: addr, NodeID: node, Cluster: node, Mode: adsclient.Delta, InitialFetchTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out map[string][]string
	collect := func(s adsclient.State) map[string][]string {
		m := map[string][]string{}
		for _, n := range s.RouteConfigNames() {
			port := n[strings.LastIndexAny(n, "-:.")+1:]
			for _, vh := range s.RouteConfig(n).GetVirtualHosts() {
				m[port] = append(m[port], vh.GetDomains()...)
			}
			slices.Sort(m[port])
		}
		return m
	}
	if _, err := c.Wait(ctx, func(s adsclient.State) bool { out = collect(s); return len(out) >= wantRoutes }); err != nil {
		t.Fatalf("%s: no route configurations for %s: %v\n%s", addr, node, err, c.Snapshot())
	}
	return out
}

// TestIngressDomainsMatchConsulXDS: an ingress-gateway's virtual hosts
// answer the same Host headers as Consul 1.15.4's own xDS server's for
// the gateway: the hosts written, Consul's default "<service>.ingress.*",
// and each of them with the listener's port (clients on a port other
// than 80 and 443 send it in the Host header: curl
// http://api.example.com:8080/ sends "api.example.com:8080", which Envoy
// matches with the port), a host written with a port left alone.
func TestIngressDomainsMatchConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	registerServices(t, agent,
		&api.AgentServiceRegistration{Name: "api", Port: 9090, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "web", Port: 9091, Connect: withSidecar()},
		&api.AgentServiceRegistration{Kind: api.ServiceKindIngressGateway, Name: "edge", ID: "edge", Port: 8443})
	writeEntries(t, agent,
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "web", Protocol: "http"},
		&api.IngressGatewayConfigEntry{Kind: api.IngressGateway, Name: "edge", Listeners: []api.IngressListener{
			{Port: 8080, Protocol: "http", Services: []api.IngressService{
				{Name: "api", Hosts: []string{"api.example.com", "api.example.net:8080"}},
				{Name: "web"},
			}},
			{Port: 9000, Protocol: "http", Services: []api.IngressService{{Name: "web", Hosts: []string{"*"}}}},
		}})
	h := startEntriesBridge(t, agent, "")
	consul := gatewayDomains(t, agent.GRPCAddr(), "edge", 2)
	ours := gatewayDomains(t, h.daemon.XDSAddr().String(), "edge", 2)
	t.Logf("Consul: %v", consul)
	t.Logf("bridge: %v", ours)
	want := map[string][]string{
		"8080": {"api.example.com", "api.example.com:8080", "api.example.net:8080", "web.ingress.*", "web.ingress.*:8080"},
		"9000": {"*", "*:9000"},
	}
	for port, w := range want {
		if !slices.Equal(consul[port], w) {
			t.Fatalf("Consul's own domains on %s: %v, want %v: the reference changed", port, consul[port], w)
		}
		if matchable := envoyMatchable(consul[port]); !slices.Equal(ours[port], matchable) {
			t.Errorf("listener %s: the bridge's domains %v, Consul's that a Host header can match %v", port, ours[port], matchable)
		}
	}
}

// envoyMatchable is domains without those Envoy can never match: one
// with a "*" neither first nor last (Consul's "web.ingress.*:8080") is
// taken as a literal host, which no client sends (Envoy's RouteMatcher:
// "*" alone, a leading "*" a suffix wildcard, a trailing one a prefix
// wildcard, anything else exact).
func envoyMatchable(domains []string) []string {
	return slices.DeleteFunc(slices.Clone(domains), func(d string) bool {
		i := strings.Index(d, "*")
		return i > 0 && i < len(d)-1
	})
}
