package bridge_test

import (
	"context"
	"fmt"
	"maps"
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

// TestIngressTLSListenersMatchConsulXDS: the listeners and services the
// bridge leaves out because Consul serves them only over TLS are the
// ones Consul 1.15.4's own xDS server does serve with TLS for the
// gateway: TLS enabled on a listener, a listener's SDS certificate, and
// a service's own SDS certificate (a TLS filter chain of its own, by
// SNI, its hosts missing from the listener's plain-text routes). A
// listener with neither stays plain text in both, and the bridge serves
// it with the same hosts.
func TestIngressTLSListenersMatchConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	registerServices(t, agent,
		&api.AgentServiceRegistration{Name: "api", Port: 9090, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "web", Port: 9091, Connect: withSidecar()},
		&api.AgentServiceRegistration{Kind: api.ServiceKindIngressGateway, Name: "edge", ID: "edge", Port: 8443})
	sds := func(cert string) *api.GatewayTLSSDSConfig {
		return &api.GatewayTLSSDSConfig{ClusterName: "sds", CertResource: cert}
	}
	writeEntries(t, agent,
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "web", Protocol: "http"},
		&api.IngressGatewayConfigEntry{Kind: api.IngressGateway, Name: "edge", Listeners: []api.IngressListener{
			{Port: 8080, Protocol: "http", TLS: &api.GatewayTLSConfig{Enabled: true}, Services: []api.IngressService{{Name: "web"}}},
			{Port: 8081, Protocol: "http", TLS: &api.GatewayTLSConfig{SDS: sds("edge-cert")}, Services: []api.IngressService{{Name: "web"}}},
			{Port: 8082, Protocol: "http", Services: []api.IngressService{
				{Name: "api", Hosts: []string{"api.example.com"}, TLS: &api.GatewayServiceTLSConfig{SDS: sds("api-cert")}},
				{Name: "web", Hosts: []string{"web.example.com"}},
			}},
		}})
	h := startEntriesBridge(t, agent, "")

	// Consul's: per port, whether a filter chain of its listener is TLS,
	// and the domains of its plain-text chain's routes (route "PORT").
	consulState := func() adsclient.State {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: agent.GRPCAddr(), NodeID: "edge", Cluster: "edge", Mode: adsclient.Delta, InitialFetchTimeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		st, err := c.Wait(ctx, func(s adsclient.State) bool { return len(s.ListenerNames()) == 3 && s.RouteConfig("8082") != nil })
		if err != nil {
			t.Fatalf("Consul: %v\n%s", err, c.Snapshot())
		}
		return st
	}()
	tlsChains := map[string][2]int{} // port: TLS chains, plain-text chains
	for _, n := range consulState.ListenerNames() {
		l := consulState.Listener(n)
		port := fmt.Sprint(l.GetAddress().GetSocketAddress().GetPortValue())
		c := tlsChains[port]
		for _, fc := range l.GetFilterChains() {
			if fc.GetTransportSocket() != nil {
				c[0]++
			} else {
				c[1]++
			}
		}
		tlsChains[port] = c
	}
	if want := map[string][2]int{"8080": {1, 0}, "8081": {1, 0}, "8082": {1, 1}}; !maps.Equal(tlsChains, want) {
		t.Fatalf("Consul's (TLS, plain-text) filter chains per port %v, want %v: the reference changed", tlsChains, want)
	}
	var consulPlain []string
	for _, vh := range consulState.RouteConfig("8082").GetVirtualHosts() {
		consulPlain = append(consulPlain, vh.GetDomains()...)
	}
	slices.Sort(consulPlain)

	ours := gatewayDomains(t, h.daemon.XDSAddr().String(), "edge", 1)
	if want := map[string][]string{"8082": consulPlain}; !maps.EqualFunc(ours, want, slices.Equal) {
		t.Errorf("the bridge serves in plain text %v; Consul serves in plain text only %v (ports 8080 and 8081 and api's hosts over TLS)", ours, want)
	}
	warnings := strings.Join(h.daemon.Policy().PolicyWarnings, "\n")
	for _, w := range []string{"listener 8080: Consul serves it with TLS", "listener 8081: Consul serves it with TLS", `listener 8082: service "api": Consul serves it with TLS only`} {
		if !strings.Contains(warnings, w) {
			t.Errorf("no warning %q on /v1/policy:\n%s", w, warnings)
		}
	}
}
