package bridge_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// gatewayRouting is what a gateway's xDS (from the server at addr, dialled
// as node) answers Host headers with: per listener port, the route
// configuration and whether its HTTP connection manager strips the port
// from the Host header before matching (strip_any_host_port).
type gatewayRouting map[uint32]struct {
	rc        *routev3.RouteConfiguration
	stripPort bool
}

func gatewayRoutes(t *testing.T, addr, node string, wantListeners int) gatewayRouting {
	t.Helper()
	// Consul's own server sends a gateway nothing until its controllers
	// have bound the gateway's routes, which on a loaded two-core machine
	// (every package's tests at once) once took over 20 s.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: addr, NodeID: node, Cluster: node, Mode: adsclient.Delta, InitialFetchTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out gatewayRouting
	collect := func(s adsclient.State) bool {
		out = gatewayRouting{}
		for _, n := range s.ListenerNames() {
			l := s.Listener(n)
			for _, fc := range l.GetFilterChains() {
				if fc.GetTransportSocket() != nil {
					continue // TLS: not what a plain-text client reaches
				}
				for _, f := range fc.GetFilters() {
					hcm := &hcmv3.HttpConnectionManager{}
					if f.GetTypedConfig().UnmarshalTo(hcm) != nil || hcm.GetRds() == nil {
						continue
					}
					rc := s.RouteConfig(hcm.GetRds().GetRouteConfigName())
					if rc == nil {
						return false
					}
					port := l.GetAddress().GetSocketAddress().GetPortValue()
					out[port] = struct {
						rc        *routev3.RouteConfiguration
						stripPort bool
					}{rc, hcm.GetStripAnyHostPort()}
				}
			}
		}
		return len(out) >= wantListeners
	}
	if _, err := c.Wait(ctx, collect); err != nil {
		t.Fatalf("%s: no HTTP listeners for %s: %v\n%s", addr, node, err, c.Snapshot())
	}
	return out
}

// answer is the virtual host Envoy picks for host on port ("" for none),
// named by its domains without their ports: Envoy's order (an exact
// domain, the longest suffix wildcard, the longest prefix wildcard, "*"),
// after stripping the port when the connection manager says so.
func (g gatewayRouting) answer(port uint32, host string) string {
	r, ok := g[port]
	if !ok {
		return "no listener"
	}
	host = strings.ToLower(host)
	if r.stripPort {
		if h, _, ok := strings.Cut(host, ":"); ok {
			host = h
		}
	}
	var best *routev3.VirtualHost
	rank, length := 0, 0 // 4 exact, 3 suffix, 2 prefix, 1 "*"
	for _, vh := range r.rc.GetVirtualHosts() {
		for _, d := range vh.GetDomains() {
			d = strings.ToLower(d)
			r, l := 0, 0
			switch {
			case d == host:
				r = 4
			case d == "*":
				r = 1
			case strings.HasPrefix(d, "*") && len(host) > len(d)-1 && strings.HasSuffix(host, d[1:]):
				r, l = 3, len(d)-1
			case strings.HasSuffix(d, "*") && len(host) > len(d)-1 && strings.HasPrefix(host, d[:len(d)-1]):
				r, l = 2, len(d)-1
			}
			if r > rank || (r == rank && r > 0 && l > length) {
				best, rank, length = vh, r, l
			}
		}
	}
	if best == nil {
		return ""
	}
	var names []string
	for _, d := range best.GetDomains() {
		if h, _, ok := strings.Cut(d, ":"); ok && d != "*" && !strings.HasPrefix(d, "*:") {
			d = h
		} else if strings.HasPrefix(d, "*:") {
			d = "*"
		}
		if !slices.Contains(names, d) {
			names = append(names, d)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// sameAnswers fails t where the bridge's gateway answers a Host header
// on a port differently from Consul's.
func sameAnswers(t *testing.T, consul, ours gatewayRouting, port uint32, hosts ...string) {
	t.Helper()
	for _, h := range hosts {
		if c, o := consul.answer(port, h), ours.answer(port, h); c != o {
			t.Errorf("port %d, Host %q: Consul's gateway answers with virtual host %q, the bridge's with %q", port, h, c, o)
		}
	}
}

// TestIngressDomainsMatchConsulXDS: an ingress gateway answers the same
// Host headers with the same virtual host as Consul 1.15.4's own xDS
// server's: the hosts written, Consul's default "<service>.ingress.*",
// "*", each with and without the listener's port (a client on a port
// other than 80 and 443 sends it: Consul lists each host with the port,
// the bridge's listeners strip any port before matching). Pinned
// divergence: a Host with another port (a.example.com:1234) reaches
// the bridge's virtual host and none of Consul's.
func TestIngressDomainsMatchConsulXDS(t *testing.T) {
	agent := startIngressWorld(t)
	writeEntries(t, agent,
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "web", Protocol: "http"},
		&api.IngressGatewayConfigEntry{Kind: api.IngressGateway, Name: "edge", Listeners: []api.IngressListener{
			{Port: 8080, Protocol: "http", Services: []api.IngressService{
				{Name: "api", Hosts: []string{"api.example.com", "*.api.example.net"}},
				{Name: "web"},
			}},
			{Port: 9000, Protocol: "http", Services: []api.IngressService{{Name: "web", Hosts: []string{"*"}}}},
		}})
	h := startEntriesBridge(t, agent, "")
	consul := gatewayRoutes(t, agent.GRPCAddr(), "edge", 2)
	ours := gatewayRoutes(t, h.daemon.XDSAddr().String(), "edge", 2)
	if got := consul.answer(8080, "api.example.com:8080"); got != "*.api.example.net,api.example.com" {
		t.Fatalf("Consul's gateway answers api.example.com:8080 with %q: the reference changed", got)
	}
	sameAnswers(t, consul, ours, 8080, "api.example.com", "api.example.com:8080", "API.example.com:8080", "x.api.example.net", "x.api.example.net:8080",
		"web.ingress.example.com", "web.ingress.example.com:8080", "other.example.com", "other.example.com:8080")
	sameAnswers(t, consul, ours, 9000, "anything", "anything:9000", "web.ingress.example.com:9000")
	if c, o := consul.answer(8080, "api.example.com:1234"), ours.answer(8080, "api.example.com:1234"); c != "" || o == "" {
		t.Errorf("a Host with another port: Consul %q, the bridge %q; the pinned divergence changed", c, o)
	}
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
	agent := startIngressWorld(t)
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
	// In plain text, Consul answers on 8082 only (web's hosts; api's are
	// on its TLS chain), and so does the bridge.
	consulPlain := gatewayRoutes(t, agent.GRPCAddr(), "edge", 1)
	ours := gatewayRoutes(t, h.daemon.XDSAddr().String(), "edge", 1)
	if c, o := slices.Sorted(maps.Keys(consulPlain)), slices.Sorted(maps.Keys(ours)); !slices.Equal(c, o) || !slices.Equal(o, []uint32{8082}) {
		t.Errorf("plain-text HTTP listeners: Consul's on ports %v, the bridge's on %v (want only 8082: 8080, 8081 and api's hosts are TLS in Consul)", c, o)
	}
	sameAnswers(t, consulPlain, ours, 8082, "web.example.com", "web.example.com:8082", "api.example.com", "api.example.com:8082")
	warnings := strings.Join(h.daemon.Policy().PolicyWarnings, "\n")
	for _, w := range []string{"listener 8080: Consul serves it with TLS", "listener 8081: Consul serves it with TLS", `listener 8082: service "api": Consul serves it with TLS only`} {
		if !strings.Contains(warnings, w) {
			t.Errorf("no warning %q on /v1/policy:\n%s", w, warnings)
		}
	}
}

// startIngressWorld is a Consul with two Connect services, api and web,
// behind the ingress gateway "edge" (its config entry is each test's).
func startIngressWorld(t *testing.T) *consultest.Agent {
	t.Helper()
	agent := consultest.Start(t)
	registerServices(t, agent,
		&api.AgentServiceRegistration{Name: "api", Port: 9090, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "web", Port: 9091, Connect: withSidecar()},
		&api.AgentServiceRegistration{Kind: api.ServiceKindIngressGateway, Name: "edge", ID: "edge", Port: 8443})
	return agent
}
