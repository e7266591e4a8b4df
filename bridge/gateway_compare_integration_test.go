package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// gatewayView is what a gateway Envoy must agree on whichever server it
// points at: where it listens, which server names its filter chains
// match and what each chain does, which clusters it dials with which SNI
// and names it checks, and where its endpoints are.
type gatewayView struct {
	binds []string
	// chains are, per chain with server names, "SNI: filters [tls]".
	chains []string
	// fallback is the filter names of the chain without server names.
	fallback string
	// clusters are "NAME sni=SNI sans=SANS ca=FILE cert=FILE" lines;
	// endpoints "CLUSTER ADDR:PORT" lines.
	clusters, endpoints []string
}

var exactRE = regexp.MustCompile(`"exact":"([^"]+)"`)

func gatewayViewOf(st adsclient.State) gatewayView {
	var v gatewayView
	for _, n := range st.ListenerNames() {
		l := st.Listener(n)
		sa := l.GetAddress().GetSocketAddress()
		v.binds = append(v.binds, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
		for _, fc := range l.GetFilterChains() {
			var names []string
			for _, f := range fc.GetFilters() {
				names = append(names, f.GetName())
				hcm := &hcmv3.HttpConnectionManager{}
				if f.GetTypedConfig().UnmarshalTo(hcm) != nil {
					continue
				}
				// An HTTP chain: its HTTP filters, whom it tells the caller,
				// and where its route configuration sends requests.
				var hfs, targets []string
				for _, hf := range hcm.GetHttpFilters() {
					hfs = append(hfs, hf.GetName())
				}
				for _, vh := range st.RouteConfig(hcm.GetRds().GetRouteConfigName()).GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						targets = append(targets, r.GetMatch().GetPrefix()+"->"+r.GetRoute().GetCluster())
					}
				}
				names = append(names, fmt.Sprintf("(rds=%s http=%s xfcc=%s routes=%s)", hcm.GetRds().GetRouteConfigName(), strings.Join(hfs, ","),
					hcm.GetForwardClientCertDetails(), strings.Join(targets, ",")))
			}
			sn := fc.GetFilterChainMatch().GetServerNames()
			if len(sn) == 0 {
				v.fallback = strings.Join(names, ",")
				continue
			}
			tls := "plain"
			if b, _ := protojson.Marshal(fc.GetTransportSocket()); strings.Contains(string(b), `"requireClientCertificate":true`) {
				tls = "mtls"
			}
			v.chains = append(v.chains, fmt.Sprintf("%s: %s [%s]", strings.Join(sn, ","), strings.Join(names, ","), tls))
		}
	}
	for _, n := range st.ClusterNames() {
		c := st.Cluster(n)
		ts := c.GetTransportSocket()
		b, _ := protojson.Marshal(ts)
		var sans []string
		for _, m := range exactRE.FindAllStringSubmatch(string(b), -1) {
			sans = append(sans, m[1])
		}
		line := fmt.Sprintf("%s sni=%s sans=%s", n, sniOf(string(b)), strings.Join(sans, ","))
		for _, f := range regexp.MustCompile(`"filename":"([^"]+)"`).FindAllStringSubmatch(string(b), -1) {
			line += " file=" + f[1]
		}
		v.clusters = append(v.clusters, line)
		for _, ep := range st.Endpoints(n) {
			v.endpoints = append(v.endpoints, fmt.Sprintf("%s %s %s", n, ep.Address, ep.Health))
		}
	}
	slices.Sort(v.binds)
	slices.Sort(v.chains)
	slices.Sort(v.clusters)
	slices.Sort(v.endpoints)
	return v
}

func sniOf(js string) string {
	if m := sniRE.FindStringSubmatch(js); m != nil {
		return m[1]
	}
	return ""
}

// registerTerminatingGateway registers, as an operator would, two
// external services (ext1 plain TCP, ext2 HTTP over TLS with the entry's
// files and SNI) on a node of their own, a terminating gateway "tgw" on the agent
// (port 9443) and its config entry linking both; and intentions for ext1:
// web allowed, ops denied.
func registerTerminatingGateway(t *testing.T, agent *consultest.Agent) {
	t.Helper()
	c := agent.Client()
	for _, s := range []struct {
		name string
		port int
	}{{"ext1", 5432}, {"ext2", 6443}} {
		if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: "external", Address: "127.0.0.9", NodeMeta: map[string]string{"external-node": "true"},
			Service: &api.AgentService{ID: s.name, Service: s.name, Port: s.port}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{Kind: api.ServiceKindTerminatingGateway, ID: "tgw", Name: "tgw", Address: "127.0.0.1", Port: 9443}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []api.ConfigEntry{
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "ext2", Protocol: "http"},
		&api.TerminatingGatewayConfigEntry{Kind: api.TerminatingGateway, Name: "tgw", Services: []api.LinkedService{
			{Name: "ext1"},
			{Name: "ext2", CAFile: "/etc/tgw/ext2-ca.pem", CertFile: "/etc/tgw/client.pem", KeyFile: "/etc/tgw/client-key.pem", SNI: "ext2.example.com"},
		}},
		&api.ServiceIntentionsConfigEntry{Kind: api.ServiceIntentions, Name: "ext1", Sources: []*api.SourceIntention{
			{Name: "web", Action: api.IntentionActionAllow},
			{Name: "ops", Action: api.IntentionActionDeny},
		}},
	} {
		if _, _, err := c.ConfigEntries().Set(e, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// dialGateway subscribes as the gateway's Envoy (node id = its service
// id) and waits for a listener with want chains and every cluster.
func dialGateway(t *testing.T, addr, nodeID string, want int) (*adsclient.Client, adsclient.State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: addr, NodeID: nodeID, Cluster: "tgw", Mode: adsclient.Delta,
		// The bridge leaves the mesh's secrets to the per-VM agent.
		InitialFetchTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	st, err := c.Wait(ctx, func(s adsclient.State) bool {
		v := gatewayViewOf(s)
		// An HTTP chain's view is complete with its route configuration.
		return len(v.chains) >= want && len(v.endpoints) >= want && !strings.Contains(strings.Join(v.chains, " "), "routes=)")
	})
	if err != nil {
		t.Fatalf("%s: %v", addr, err)
	}
	return c, st
}

// chainListener is the one listener of a gateway's state.
func chainListener(t *testing.T, st adsclient.State) *listenerv3.Listener {
	t.Helper()
	ns := st.ListenerNames()
	if len(ns) != 1 {
		t.Fatalf("gateway listeners %v, want one", ns)
	}
	return st.Listener(ns[0])
}

// TestTerminatingGatewayMatchesConsulXDS: for the same registrations and
// entries, Consul 1.15.4's own xDS server (this agent's gRPC port) and
// the bridge give the terminating gateway the same bind, one mutual-TLS
// chain per linked service matched by its mesh SNI with the same filters
// (network RBAC, then tcp_proxy), the same cluster names, upstream SNI,
// SANs and TLS files, and the same endpoints (the external instances).
// Pinned divergences (docs/gateways.md):
//   - the catch-all chain: Consul's sni_cluster passthrough, the bridge's
//     deny-all RBAC before tcp_proxy;
//   - listener names (compared by bind, as for sidecars).
func TestTerminatingGatewayMatchesConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	registerTerminatingGateway(t, agent)
	// Not every service: the linked ones are followed because they are
	// linked.
	h := startMeshBridge(t, agent, "export_all_services = false\nmesh {}\n")
	_, consul := dialGateway(t, agent.GRPCAddr(), "tgw", 2)
	bc, ours := dialGateway(t, h.daemon.XDSAddr().String(), "tgw", 2)
	cv, bv := gatewayViewOf(consul), gatewayViewOf(ours)
	t.Logf("Consul: %+v", cv)
	t.Logf("bridge: %+v", bv)
	if !slices.Equal(cv.binds, bv.binds) || len(bv.binds) != 1 {
		t.Errorf("listener binds: Consul %v, bridge %v", cv.binds, bv.binds)
	}
	if !slices.Equal(cv.chains, bv.chains) || len(bv.chains) != 2 {
		t.Errorf("filter chains:\nConsul %q\nbridge %q", cv.chains, bv.chains)
	}
	if !slices.Equal(cv.clusters, bv.clusters) || len(bv.clusters) != 2 {
		t.Errorf("clusters:\nConsul %q\nbridge %q", cv.clusters, bv.clusters)
	}
	if !slices.Equal(cv.endpoints, bv.endpoints) {
		t.Errorf("endpoints: Consul %v, bridge %v", cv.endpoints, bv.endpoints)
	}
	// Pinned: the catch-all chain.
	if cv.fallback != "envoy.filters.network.sni_cluster,envoy.filters.network.tcp_proxy" {
		t.Errorf("Consul's catch-all chain is %q: the pinned divergence has moved", cv.fallback)
	}
	if bv.fallback != "envoy.filters.network.rbac,envoy.filters.network.tcp_proxy" {
		t.Errorf("bridge's catch-all chain is %q, want deny-all RBAC then tcp_proxy", bv.fallback)
	}

	// What sidecars dialing a linked service reach: Consul answers the
	// service's Connect endpoints with the gateway (which the bridge's
	// sidecars then dial, judged by the gateway's own health).
	conn, _, err := agent.Client().Health().Connect("ext1", "", false, nil)
	if err != nil || len(conn) != 1 || conn[0].Service.ID != "tgw" || conn[0].Service.Kind != api.ServiceKindTerminatingGateway {
		t.Errorf("/v1/health/connect/ext1: %v %+v", err, conn)
	}

	// /v1/proxies shows the gateway, keyed by its service id.
	_, body := get(t, "http://"+h.daemon.AdminAddr().String()+"/v1/proxies")
	var proxies []serve.ProxyStatus
	if err := json.Unmarshal([]byte(body), &proxies); err != nil {
		t.Fatalf("/v1/proxies: %v: %s", err, body)
	}
	i := slices.IndexFunc(proxies, func(p serve.ProxyStatus) bool { return p.NodeID == "tgw" })
	switch {
	case i < 0:
		t.Errorf("/v1/proxies has no tgw: %s", body)
	case proxies[i].Sidecar == nil || proxies[i].Sidecar.Kind != "terminating-gateway" || proxies[i].Sidecar.Service != "tgw" ||
		!slices.Equal(proxies[i].Sidecar.Upstreams, []string{"ext1@" + cv.chains[0][:strings.Index(cv.chains[0], ":")], "ext2@" + cv.chains[1][:strings.Index(cv.chains[1], ":")]}):
		t.Errorf("/v1/proxies entry of tgw: %+v", proxies[i].Sidecar)
	}
	if st := bc.Snapshot(); len(st.SecretNames()) != 0 {
		t.Errorf("agent mode: the bridge served the gateway secrets %v (leaves stay with the per-VM agent)", st.SecretNames())
	}
}

// meshGatewayView is what a mesh gateway routes: by SNI, the endpoints
// the connection goes to (and whether it goes there in the clear, TLS
// passed through), plus its binds and catch-all chain.
type meshGatewayView struct {
	binds    []string
	routes   []string // "SNI -> ENDPOINTS tls=..."
	fallback string
	// renamed are the bridge's clusters whose name is not their SNI.
	renamed []string
}

func routeLine(st adsclient.State, sni, cluster string) string {
	var eps []string
	for _, ep := range st.Endpoints(cluster) {
		eps = append(eps, ep.Address+"/"+ep.Health)
	}
	slices.Sort(eps)
	return fmt.Sprintf("%s -> %s tls=%v", sni, strings.Join(eps, ","), st.Cluster(cluster).GetTransportSocket() != nil)
}

// consulMeshGatewayView: Consul routes with sni_cluster, so an SNI goes
// to the cluster of that name.
func consulMeshGatewayView(st adsclient.State) meshGatewayView {
	v := gatewayViewOf(st)
	mv := meshGatewayView{binds: v.binds, fallback: v.fallback}
	for _, n := range st.ClusterNames() {
		if strings.Contains(n, ".internal.") {
			mv.routes = append(mv.routes, routeLine(st, n, n))
		}
	}
	slices.Sort(mv.routes)
	return mv
}

// bridgeMeshGatewayView: the bridge routes with a chain per SNI.
func bridgeMeshGatewayView(t *testing.T, st adsclient.State) meshGatewayView {
	v := gatewayViewOf(st)
	mv := meshGatewayView{binds: v.binds, fallback: v.fallback}
	for _, n := range st.ListenerNames() {
		for _, fc := range st.Listener(n).GetFilterChains() {
			sn := fc.GetFilterChainMatch().GetServerNames()
			if len(sn) != 1 || len(fc.GetFilters()) != 1 {
				continue
			}
			tp := &tcpproxyv3.TcpProxy{}
			if err := fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(tp); err != nil {
				t.Fatal(err)
			}
			mv.routes = append(mv.routes, routeLine(st, sn[0], tp.GetCluster()))
			if tp.GetCluster() != sn[0] {
				mv.renamed = append(mv.renamed, tp.GetCluster())
			}
		}
	}
	slices.Sort(mv.routes)
	return mv
}

// TestMeshGatewayMatchesConsulXDS: for web and api with sidecars (web
// dials api), a terminating gateway "tgw" linking ext1 and ext2, and a
// mesh gateway "mgw", Consul 1.15.4's own xDS server and the bridge give
// the mesh gateway the same bind and route the same SNIs (each local
// service's mesh name) to the same endpoints (its sidecars; for ext1 and
// ext2 the terminating gateway), in the clear (TLS passes through end to
// end). Pinned divergences
// (docs/gateways.md): Consul routes with one sni_cluster chain, the
// bridge with one chain per SNI and a deny-all catch-all; and the
// bridge's cluster to api is named Consul's name + "/mgw", because web's
// sidecar's mTLS cluster to api has Consul's name (the SNI matched is
// Consul's either way).
func TestMeshGatewayMatchesConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterWebAPIMesh(t)
	registerTerminatingGateway(t, agent)
	if err := agent.Client().Agent().ServiceRegister(&api.AgentServiceRegistration{Kind: api.ServiceKindMeshGateway, ID: "mgw", Name: "mgw", Address: "127.0.0.1", Port: 8443}); err != nil {
		t.Fatal(err)
	}
	h := startMeshBridge(t, agent, "export_all_services = false\nmesh {}\n")
	dial := func(addr string, ready func(adsclient.State) bool) adsclient.State {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for {
			c, err := adsclient.Dial(ctx, adsclient.Config{Addr: addr, NodeID: "mgw", Cluster: "mgw", Mode: adsclient.Delta, InitialFetchTimeout: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			st, err := c.Wait(ctx, ready)
			// A gateway that connects before the bridge has read its
			// registration is told to reconnect once it has (it is then
			// keyed by it), as an Envoy does.
			if err != nil && strings.Contains(err.Error(), "registration of node \"mgw\" changed") && ctx.Err() == nil {
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", addr, err)
			}
			return st
		}
	}
	theirs := consulMeshGatewayView(dial(agent.GRPCAddr(), func(s adsclient.State) bool {
		v := consulMeshGatewayView(s)
		return len(v.binds) == 1 && len(v.routes) == 4 && !strings.Contains(strings.Join(v.routes, " "), "->  ")
	}))
	ours := bridgeMeshGatewayView(t, dial(h.daemon.XDSAddr().String(), func(s adsclient.State) bool {
		v := bridgeMeshGatewayView(t, s)
		return len(v.binds) == 1 && len(v.routes) == 4 && !strings.Contains(strings.Join(v.routes, " "), "->  ")
	}))
	t.Logf("Consul: %+v", theirs)
	t.Logf("bridge: %+v", ours)
	if !slices.Equal(theirs.binds, ours.binds) || len(ours.binds) != 1 {
		t.Errorf("binds: Consul %v, bridge %v", theirs.binds, ours.binds)
	}
	if !slices.Equal(theirs.routes, ours.routes) {
		t.Errorf("routes:\nConsul %q\nbridge %q", theirs.routes, ours.routes)
	}
	if theirs.fallback != "envoy.filters.network.sni_cluster,envoy.filters.network.tcp_proxy" {
		t.Errorf("Consul's catch-all chain is %q: the pinned divergence has moved", theirs.fallback)
	}
	if ours.fallback != "envoy.filters.network.rbac,envoy.filters.network.tcp_proxy" {
		t.Errorf("bridge's catch-all chain is %q, want deny-all RBAC then tcp_proxy", ours.fallback)
	}
	roots, _, err := agent.Client().Connect().CARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	td := roots.TrustDomain
	if want := []string{ir.MeshClusterName("api", "dc1", td) + "/mgw", ir.MeshClusterName("ext1", "dc1", td) + "/mgw", ir.MeshClusterName("ext2", "dc1", td) + "/mgw"}; !slices.Equal(ours.renamed, want) {
		t.Errorf("renamed clusters %v, want only %v (web's sidecar holds api's name, the terminating gateway ext1's and ext2's)", ours.renamed, want)
	}
}
