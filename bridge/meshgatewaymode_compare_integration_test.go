package bridge_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/hashicorp/consul/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// twoDatacenters starts dc1 and dc2 WAN-federated on loopback (dc1
// primary, so both share one Connect trust domain), each with a mesh
// gateway ("mgw1": LAN 127.0.0.11, WAN 127.0.0.12; "mgw2": LAN
// 127.0.0.21, WAN 127.0.0.22, port 8443), and api in dc2 with a healthy
// sidecar (hand-registered: a sidecar_service's default checks would fail,
// nothing listens). It returns both and the trust domain.
func twoDatacenters(t *testing.T) (dc1, dc2 *consultest.Agent, td string) {
	t.Helper()
	dc1 = consultest.Start(t, consultest.WithDatacenter("dc1", "dc1"))
	dc2 = consultest.Start(t, consultest.WithDatacenter("dc2", "dc1"))
	dc2.JoinWAN(t, dc1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		// dc2's CA is an intermediate dc1 signs once the WAN is up.
		td = trustDomain(t, dc1)
		r2, _, err := dc2.Client().Connect().CARoots(nil)
		if err == nil && r2.TrustDomain == td && len(r2.Roots) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dc2 never shared dc1's trust domain %s: %v, %v", td, r2, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	gateway := func(a *consultest.Agent, id, lan, wan string) {
		registerServices(t, a, &api.AgentServiceRegistration{Kind: api.ServiceKindMeshGateway, ID: id, Name: "mesh-gateway", Address: lan, Port: 8443,
			TaggedAddresses: map[string]api.ServiceAddress{"lan": {Address: lan, Port: 8443}, "wan": {Address: wan, Port: 8443}}})
	}
	gateway(dc1, "mgw1", "127.0.0.11", "127.0.0.12")
	gateway(dc2, "mgw2", "127.0.0.21", "127.0.0.22")
	registerServices(t, dc2, &api.AgentServiceRegistration{Name: "api", Port: 9090},
		&api.AgentServiceRegistration{Kind: api.ServiceKindConnectProxy, ID: "api-sidecar-proxy", Name: "api-sidecar-proxy", Port: 21000,
			Proxy: &api.AgentServiceConnectProxyConfig{DestinationServiceName: "api", DestinationServiceID: "api", LocalServicePort: 9090}})
	return dc1, dc2, td
}

// crossDCClient registers service name in dc1 (port port) whose sidecar
// dials api in dc2 on bindPort with mesh gateway mode ("" for none set).
func crossDCClient(t *testing.T, dc1 *consultest.Agent, name string, port, bindPort int, mode api.MeshGatewayMode) {
	t.Helper()
	meshClient(t, dc1, name, port, api.Upstream{DestinationName: "api", Datacenter: "dc2", LocalBindPort: bindPort, MeshGateway: api.MeshGatewayConfig{Mode: mode}})
}

// meshClient registers service name (port port) with a sidecar_service
// whose one upstream is up.
func meshClient(t *testing.T, agent *consultest.Agent, name string, port int, up api.Upstream) {
	t.Helper()
	registerServices(t, agent, &api.AgentServiceRegistration{Name: name, Port: port, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
		Proxy: &api.AgentServiceConnectProxyConfig{Upstreams: []api.Upstream{up}}}}})
}

// upstreamOf is what a sidecar's upstream bound on port does, as a line:
// its cluster's name, SNI, SANs and endpoints (address/health), or "" if
// the state lacks any of them.
func upstreamOf(st adsclient.State, port uint32) string {
	for _, n := range st.ListenerNames() {
		l := st.Listener(n)
		if l.GetAddress().GetSocketAddress().GetPortValue() != port {
			continue
		}
		cluster := tcpProxyCluster(l)
		c := st.Cluster(cluster)
		if c == nil {
			return ""
		}
		b, _ := protojson.Marshal(c.GetTransportSocket())
		var sans, eps []string
		for _, m := range exactRE.FindAllStringSubmatch(string(b), -1) {
			sans = append(sans, m[1])
		}
		for _, ep := range st.Endpoints(cluster) {
			eps = append(eps, ep.Address+"/"+ep.Health)
		}
		if len(eps) == 0 {
			return ""
		}
		slices.Sort(eps)
		return fmt.Sprintf("%s sni=%s sans=%s endpoints=%s", cluster, sniOf(string(b)), strings.Join(sans, ","), strings.Join(eps, ","))
	}
	return ""
}

// tcpProxyCluster is the cluster of l's first tcp_proxy filter, "" if none.
func tcpProxyCluster(l *listenerv3.Listener) string {
	for _, fc := range l.GetFilterChains() {
		if c := chainTCPCluster(fc); c != "" {
			return c
		}
	}
	return ""
}

// chainTCPCluster is the cluster of fc's tcp_proxy filter, "" if none.
func chainTCPCluster(fc *listenerv3.FilterChain) string {
	for _, f := range fc.GetFilters() {
		tp := &tcpproxyv3.TcpProxy{}
		if f.GetTypedConfig().UnmarshalTo(tp) == nil {
			return tp.GetCluster()
		}
	}
	return ""
}

// remoteChainOf is a mesh gateway's chain for another datacenter's
// services ("*.DC.internal.TD"), as "SERVER-NAME -> CLUSTER ENDPOINTS".
func remoteChainOf(st adsclient.State, serverName string) string {
	for _, n := range st.ListenerNames() {
		for _, fc := range st.Listener(n).GetFilterChains() {
			if !slices.Contains(fc.GetFilterChainMatch().GetServerNames(), serverName) {
				continue
			}
			if c := chainTCPCluster(fc); c != "" {
				var eps []string
				for _, ep := range st.Endpoints(c) {
					eps = append(eps, ep.Address)
				}
				if len(eps) == 0 {
					return ""
				}
				return fmt.Sprintf("%s -> %s %s tls=%v", serverName, c, strings.Join(eps, ","), st.Cluster(c).GetTransportSocket() != nil)
			}
		}
	}
	return ""
}

// stateOf dials addr as node (cluster name cluster) and returns its state
// once ready holds.
func stateOf(t *testing.T, addr, node, cluster string, ready func(adsclient.State) bool) adsclient.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: addr, NodeID: node, Cluster: cluster, Mode: adsclient.Delta, InitialFetchTimeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Wait(ctx, ready)
		snap := c.Snapshot()
		c.Close()
		// A server that closes the stream with UNAVAILABLE asks the proxy
		// to reconnect, and Envoy does: the bridge does so when a node's
		// Connect sidecar registration reaches it after the node connected
		// (it then belongs to another group). Reconnect as Envoy would.
		if err != nil && status.Code(err) == codes.Unavailable && ctx.Err() == nil {
			t.Logf("%s as %s: stream closed, reconnecting as Envoy does: %v", addr, node, err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("%s as %s: %v\n%s", addr, node, err, snap)
		}
		return st
	}
}

// TestMeshGatewayModesMatchConsulXDS: two datacenters WAN-joined on
// loopback (real Consul 1.15.4 agents), api only in dc2. For the same
// registrations and entries, Consul's own xDS server and the bridge give
//   - web (upstream api@dc2, mesh_gateway local on the upstream): a
//     cluster named as Consul names a customized chain (HASH~SNI), with
//     dc2's SNI and api's dc2 SPIFFE id, whose endpoint is dc1's gateway
//     at its LAN address, HEALTHY as api's sidecar is;
//   - web2 (remote): dc2's gateway at its WAN address;
//   - web3 (no override) after proxy-defaults sets local: the plain name
//     and dc1's gateway; web's name loses its prefix then (its override no
//     longer differs from the target's own mode);
//   - dc1's mesh gateway: a chain for "*.dc2.internal.TD" to dc2's
//     gateway's WAN address, TLS untouched;
//
// and the bridge serving dc2 gives dc2's gateway a chain for api's dc2
// SNI to api's sidecar: the path web → mgw1 → mgw2 → api.
func TestMeshGatewayModesMatchConsulXDS(t *testing.T) {
	dc1, dc2, td := twoDatacenters(t)
	crossDCClient(t, dc1, "web", 8080, 10000, api.MeshGatewayModeLocal)
	crossDCClient(t, dc1, "web2", 8081, 10001, api.MeshGatewayModeRemote)
	b1 := startMeshBridge(t, dc1, "export_all_services = false\nmesh {}\n")
	b2 := startMeshBridge(t, dc2, "export_all_services = false\nmesh {}\n")
	sni := "api.default.dc2.internal." + td
	spiffe := "spiffe://" + td + "/ns/default/dc/dc2/svc/api"
	want := map[string]string{
		"web":  "c225dc1c~" + sni + " sni=" + sni + " sans=" + spiffe + " endpoints=127.0.0.11:8443/HEALTHY",
		"web2": "dd412229~" + sni + " sni=" + sni + " sans=" + spiffe + " endpoints=127.0.0.22:8443/HEALTHY",
	}
	port := map[string]uint32{"web": 10000, "web2": 10001, "web3": 10002}
	check := func(service, want string) {
		t.Helper()
		for _, srv := range []struct{ name, addr string }{{"Consul", dc1.GRPCAddr()}, {"bridge", b1.daemon.XDSAddr().String()}} {
			var got string
			stateOf(t, srv.addr, service+"-sidecar-proxy", service, func(s adsclient.State) bool {
				got = upstreamOf(s, port[service])
				if srv.name == "bridge" {
					// The pinned divergence of every mesh cluster several
					// services dial: one per dialer, NAME/SERVICE (each
					// presents its own leaf).
					if name, rest, ok := strings.Cut(got, " "); ok {
						got = strings.TrimSuffix(name, "/"+service) + " " + rest
					}
				}
				return got == want
			})
			if got != want {
				t.Errorf("%s, %s's upstream:\n got %s\nwant %s", srv.name, service, got, want)
			}
		}
	}
	check("web", want["web"])
	check("web2", want["web2"])

	remote := "*.dc2.internal." + td
	wantChain := remote + " -> dc2.internal." + td + " 127.0.0.22:8443 tls=false"
	for _, srv := range []struct{ name, addr string }{{"Consul", dc1.GRPCAddr()}, {"bridge", b1.daemon.XDSAddr().String()}} {
		stateOf(t, srv.addr, "mgw1", "mesh-gateway", func(s adsclient.State) bool { return remoteChainOf(s, remote) == wantChain })
	}
	// dc2's gateway routes api's dc2 SNI to api's sidecar.
	for _, srv := range []struct{ name, addr string }{{"Consul", dc2.GRPCAddr()}, {"bridge", b2.daemon.XDSAddr().String()}} {
		var got []string
		stateOf(t, srv.addr, "mgw2", "mesh-gateway", func(s adsclient.State) bool {
			v := consulMeshGatewayView(s)
			if srv.name == "bridge" {
				v = bridgeMeshGatewayView(t, s)
			}
			got = v.routes
			return slices.Contains(v.routes, sni+" -> 127.0.0.1:21000/HEALTHY tls=false")
		})
		t.Logf("%s: dc2 gateway routes %q", srv.name, got)
	}

	// proxy-defaults local: web's override is the target's own mode now.
	writeEntries(t, dc1, &api.ProxyConfigEntry{Kind: api.ProxyDefaults, Name: api.ProxyConfigGlobal, MeshGateway: api.MeshGatewayConfig{Mode: api.MeshGatewayModeLocal}})
	crossDCClient(t, dc1, "web3", 8082, 10002, "")
	check("web3", sni+" sni="+sni+" sans="+spiffe+" endpoints=127.0.0.11:8443/HEALTHY")
	check("web", sni+" sni="+sni+" sans="+spiffe+" endpoints=127.0.0.11:8443/HEALTHY")
}
