package bridge_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// outboundView is what a transparent sidecar's outbound listener does,
// whichever server it comes from: its name and address, its listener
// filters, where each virtual IP goes (the cluster its filter chain
// sends to: tcp_proxy's, or the route's of an HTTP chain, inline or over
// RDS) and where everything else goes.
type outboundView struct {
	Name, Addr      string
	Direction       string
	ListenerFilters []string
	Chains          map[string]string // "240.0.0.2/32" -> cluster
	Default         string            // cluster of the default chain, "" none
	Passthrough     string            // the original-destination cluster's type, "" none
}

func outboundOf(st adsclient.State, name string) (outboundView, bool) {
	l := st.Listener(name)
	if l == nil {
		return outboundView{}, false
	}
	sa := l.GetAddress().GetSocketAddress()
	v := outboundView{Name: l.GetName(), Addr: fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()), Direction: l.GetTrafficDirection().String(), Chains: map[string]string{}}
	for _, f := range l.GetListenerFilters() {
		v.ListenerFilters = append(v.ListenerFilters, f.GetName()+" "+string(f.GetTypedConfig().MessageName()))
	}
	for _, fc := range l.GetFilterChains() {
		var key []string
		for _, p := range fc.GetFilterChainMatch().GetPrefixRanges() {
			key = append(key, fmt.Sprintf("%s/%d", p.GetAddressPrefix(), p.GetPrefixLen().GetValue()))
		}
		v.Chains[strings.Join(key, ",")] = chainCluster(st, fc)
	}
	if d := l.GetDefaultFilterChain(); d != nil {
		v.Default = chainCluster(st, d)
	}
	if c := st.Cluster("original-destination"); c != nil {
		v.Passthrough = c.GetType().String() + " " + c.GetLbPolicy().String()
	}
	return v, true
}

// chainCluster is the cluster a filter chain sends to.
func chainCluster(st adsclient.State, fc *listenerv3.FilterChain) string {
	for _, f := range fc.GetFilters() {
		switch f.GetName() {
		case "envoy.filters.network.tcp_proxy":
			var tp tcpproxyv3.TcpProxy
			if f.GetTypedConfig().UnmarshalTo(&tp) == nil {
				return "tcp " + tp.GetCluster()
			}
		case "envoy.filters.network.http_connection_manager":
			var h hcmv3.HttpConnectionManager
			if f.GetTypedConfig().UnmarshalTo(&h) != nil {
				return "?"
			}
			rc := h.GetRouteConfig()
			if rds := h.GetRds(); rds != nil {
				rc = st.RouteConfig(rds.GetRouteConfigName())
			}
			for _, vh := range rc.GetVirtualHosts() {
				for _, r := range vh.GetRoutes() {
					return "http " + r.GetRoute().GetCluster()
				}
			}
			return "http (no route)"
		}
	}
	return "?"
}

// TestTransparentMatchesConsulXDS: for the same registrations (web's
// sidecar in transparent mode with one explicit upstream, db; api (tcp),
// pay (http) and db with sidecars; plain without), Consul 1.15.4's own
// xDS server and the bridge give web's sidecar the same outbound
// listener: Consul's name, 127.0.0.1:15001, the original_dst listener
// filter, one filter chain per implicit upstream matched on its virtual
// IP and sent to its mesh cluster (none for db, which has a listener of
// its own, or for web itself), and a passthrough default chain to the
// ORIGINAL_DST cluster "original-destination"; the mesh entry's
// mesh_destinations_only, an L7 intention and a deny intention change
// both the same way.
func TestTransparentMatchesConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	c := agent.Client()
	if _, _, err := c.ConfigEntries().Set(&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "pay", Protocol: "http"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, reg := range []*api.AgentServiceRegistration{
		{Name: "web", Port: 8080, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Proxy: &api.AgentServiceConnectProxyConfig{Mode: api.ProxyModeTransparent, Upstreams: []api.Upstream{{DestinationName: "db", LocalBindPort: 9191}}}}}},
		{Name: "api", Port: 9090, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}},
		{Name: "pay", Port: 9091, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}},
		{Name: "db", Port: 5432, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}},
		{Name: "plain", Port: 1234},
	} {
		if err := c.Agent().ServiceRegister(reg); err != nil {
			t.Fatal(err)
		}
	}
	h := startMeshBridge(t, agent, "mesh {}\n")
	const outbound = "outbound_listener:127.0.0.1:15001"
	vip := func(svc string) string {
		t.Helper()
		es, _, err := c.Health().Connect(svc, "", false, nil)
		if err != nil || len(es) == 0 || es[0].Service.TaggedAddresses["consul-virtual"].Address == "" {
			t.Fatalf("%s: no virtual IP (%v)", svc, err)
		}
		return es[0].Service.TaggedAddresses["consul-virtual"].Address + "/32"
	}
	dial := func(addr string) *adsclient.Client {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cl, err := adsclient.Dial(ctx, adsclient.Config{Addr: addr, NodeID: "web-sidecar-proxy", Cluster: "web", Mode: adsclient.Delta, InitialFetchTimeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	servers := []struct {
		name string
		c    *adsclient.Client
	}{{"Consul", dial(agent.GRPCAddr())}, {"bridge", dial(h.daemon.XDSAddr().String())}}
	// wait until both servers' outbound listeners satisfy ok, and
	// returns what each serves.
	wait := func(what string, ok func(outboundView, adsclient.State) bool) [2]outboundView {
		t.Helper()
		var out [2]outboundView
		for i, s := range servers {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			st, err := s.c.Wait(ctx, func(st adsclient.State) bool {
				v, found := outboundOf(st, outbound)
				return found && ok(v, st)
			})
			cancel()
			if err != nil {
				v, _ := outboundOf(s.c.Snapshot(), outbound)
				t.Fatalf("%s: %s: %v; last outbound listener: %+v", s.name, what, err, v)
			}
			out[i], _ = outboundOf(st, outbound)
		}
		return out
	}
	mesh := func(svc string) string {
		return svc + ".default.dc1.internal."
	}
	td := ""
	if roots, _, err := c.Connect().CARoots(nil); err == nil {
		td = roots.TrustDomain
	}
	cluster := func(proto, svc string) string { return proto + " " + mesh(svc) + td }

	want := outboundView{
		Name: outbound, Addr: "127.0.0.1:15001", Direction: "OUTBOUND",
		ListenerFilters: []string{"envoy.filters.listener.original_dst envoy.extensions.filters.listener.original_dst.v3.OriginalDst"},
		Chains:          map[string]string{vip("api"): cluster("tcp", "api"), vip("pay"): cluster("http", "pay")},
		Default:         "tcp original-destination",
		Passthrough:     "ORIGINAL_DST CLUSTER_PROVIDED",
	}
	got := wait("two chains and passthrough", func(v outboundView, _ adsclient.State) bool {
		for _, c := range v.Chains {
			if strings.HasSuffix(c, "(no route)") {
				return false // the route configuration is still on its way
			}
		}
		return len(v.Chains) >= 2 && v.Default != "" && v.Passthrough != ""
	})
	for i, s := range servers {
		if d := cmp.Diff(want, got[i]); d != "" {
			t.Errorf("%s's outbound listener (-want +got):\n%s", s.name, d)
		}
	}
	// The rest of web's listeners: Consul's public and db listeners are
	// ours under our names, on the same addresses (TestMeshMatchesConsulXDS).
	binds := func(st adsclient.State) []string {
		var out []string
		for _, n := range st.ListenerNames() {
			sa := st.Listener(n).GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
		}
		slices.Sort(out)
		return out
	}
	if a, b := binds(servers[0].c.Snapshot()), binds(servers[1].c.Snapshot()); !slices.Equal(a, b) {
		t.Errorf("listener addresses: Consul %v, bridge %v", a, b)
	}
	// Mesh clusters: the same, but for Consul's cluster of plain, which
	// has no sidecar (so no virtual IP, no chain: never used). Pinned
	// divergence (model/tproxy.go).
	meshClusters := func(st adsclient.State) []string {
		return slices.DeleteFunc(st.ClusterNames(), func(n string) bool { return !strings.Contains(n, ".internal.") })
	}
	cm, bm := meshClusters(servers[0].c.Snapshot()), meshClusters(servers[1].c.Snapshot())
	if w := mesh("plain") + td; !slices.Contains(cm, w) || slices.Contains(bm, w) {
		t.Errorf("plain's cluster: Consul has it %v (want true), bridge %v (want false); the divergence changed: update model/tproxy.go's note",
			slices.Contains(cm, w), slices.Contains(bm, w))
	}
	cm = slices.DeleteFunc(cm, func(n string) bool { return strings.HasPrefix(n, "plain.") })
	if !slices.Equal(cm, bm) {
		t.Errorf("mesh clusters: Consul %v, bridge %v", cm, bm)
	}
	for _, s := range servers {
		if oc := s.c.Snapshot().Cluster("original-destination"); oc.GetType() != clusterv3.Cluster_ORIGINAL_DST {
			t.Errorf("%s: original-destination is %v", s.name, oc.GetType())
		}
	}

	// mesh_destinations_only: no passthrough chain or cluster on either.
	if _, _, err := c.ConfigEntries().Set(&api.MeshConfigEntry{TransparentProxy: api.TransparentProxyMeshConfig{MeshDestinationsOnly: true}}, nil); err != nil {
		t.Fatal(err)
	}
	got = wait("no passthrough", func(v outboundView, _ adsclient.State) bool { return v.Default == "" && v.Passthrough == "" })
	want.Default, want.Passthrough = "", ""
	for i, s := range servers {
		if d := cmp.Diff(want, got[i]); d != "" {
			t.Errorf("%s with mesh_destinations_only (-want +got):\n%s", s.name, d)
		}
	}

	// An L7 intention (permissions) from web to pay keeps pay's chain
	// (Consul counts it as allowed: the permissions are enforced per
	// request by pay's sidecar); an intention denying web -> api, written
	// after it, takes api's chain away on both.
	if _, _, err := c.ConfigEntries().Set(&api.ServiceIntentionsConfigEntry{Kind: api.ServiceIntentions, Name: "pay",
		Sources: []*api.SourceIntention{{Name: "web", Permissions: []*api.IntentionPermission{{Action: api.IntentionActionAllow, HTTP: &api.IntentionHTTPPermission{PathPrefix: "/pay"}}}}}}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if _, _, err := c.ConfigEntries().Set(&api.ServiceIntentionsConfigEntry{Kind: api.ServiceIntentions, Name: "api",
		Sources: []*api.SourceIntention{{Name: "web", Action: api.IntentionActionDeny}}}, nil); err != nil {
		t.Fatal(err)
	}
	got = wait("api's chain gone", func(v outboundView, _ adsclient.State) bool { return len(v.Chains) == 1 })
	delete(want.Chains, vip("api"))
	for i, s := range servers {
		if d := cmp.Diff(want, got[i]); d != "" {
			t.Errorf("%s after denying web -> api (-want +got):\n%s", s.name, d)
		}
	}
}
