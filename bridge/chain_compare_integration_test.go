package bridge_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// registerCanary registers, as an operator would, web (whose sidecar has
// the upstream api on 9191) and two instances of api, tagged v1 and v2,
// each with its sidecar (which inherits the instance's tags), and the
// canary in config entries: api speaks http, its resolver has subsets v1
// and v2 by tag (default v1), its splitter sends 90/10 between them and
// its router sends requests with x-canary: 1 to v2 (2 s timeout); the
// resolver also sets a 3 s connect timeout and least_request balancing.
func registerCanary(t *testing.T, agent *consultest.Agent) {
	t.Helper()
	sidecar := func() *api.AgentServiceConnect {
		return &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}
	}
	for _, reg := range []*api.AgentServiceRegistration{
		{Name: "web", Port: 8080, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Proxy: &api.AgentServiceConnectProxyConfig{Upstreams: []api.Upstream{{DestinationName: "api", LocalBindPort: 9191}}}}}},
		{Name: "api", ID: "api-1", Port: 9090, Tags: []string{"v1"}, Connect: sidecar()},
		{Name: "api", ID: "api-2", Port: 9092, Tags: []string{"v2"}, Connect: sidecar()},
	} {
		if err := agent.Client().Agent().ServiceRegister(reg); err != nil {
			t.Fatalf("register %s: %v", reg.Name, err)
		}
	}
	for _, e := range []api.ConfigEntry{
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", DefaultSubset: "v1", ConnectTimeout: 3 * time.Second,
			LoadBalancer: &api.LoadBalancer{Policy: "least_request"}, Subsets: map[string]api.ServiceResolverSubset{
				"v1": {Filter: `"v1" in Service.Tags`}, "v2": {Filter: `"v2" in Service.Tags`}}},
		&api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: "api", Splits: []api.ServiceSplit{
			{Weight: 90, ServiceSubset: "v1"}, {Weight: 10, ServiceSubset: "v2"}}},
		&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "api", Routes: []api.ServiceRoute{{
			Match:       &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{Header: []api.ServiceRouteHTTPMatchHeader{{Name: "x-canary", Exact: "1"}}}},
			Destination: &api.ServiceRouteDestination{ServiceSubset: "v2", RequestTimeout: 2 * time.Second},
		}}},
	} {
		if _, _, err := agent.Client().ConfigEntries().Set(e, nil); err != nil {
			t.Fatalf("write %s/%s: %v", e.GetKind(), e.GetName(), err)
		}
	}
}

// apiSidecarAddr is the endpoint of api's sidecar with service id id (the
// sidecars of api's two instances share the name api-sidecar-proxy).
func apiSidecarAddr(t *testing.T, agent *consultest.Agent, id string) string {
	t.Helper()
	return instanceSidecarAddr(t, agent, "api", id)
}

// instanceSidecarAddr is the endpoint of service's sidecar with service
// id id.
func instanceSidecarAddr(t *testing.T, agent *consultest.Agent, service, id string) string {
	t.Helper()
	svcs, _, err := agent.Client().Catalog().Service(service+"-sidecar-proxy", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs {
		if s.ServiceID == id {
			return fmt.Sprintf("%s:%d", cmp.Or(s.ServiceAddress, s.Address), s.ServicePort)
		}
	}
	t.Fatalf("no sidecar %s in %v", id, svcs)
	return ""
}

// chainView is what the discovery chain decides for web's sidecar's
// upstream api, whichever server computed it: the routes (match, then
// targets with their share of the traffic, timeout), the mesh clusters
// with their SNI and SPIFFE SANs, and each cluster's endpoints.
type chainView struct {
	routes    []string
	clusters  []string
	endpoints map[string][]string
}

// routeView is one route as "headers -> target=share,... timeout": the
// weights as shares of their total, since Consul writes a splitter's
// percentages in hundredths (9000/1000 of 10000) where the bridge keeps
// them as written (90/10): a documented divergence with the same traffic.
func routeView(r *routev3.Route) string {
	var hs []string
	for _, h := range r.GetMatch().GetHeaders() {
		v := h.GetStringMatch().GetExact()
		if v == "" {
			v = h.GetExactMatch() //nolint:staticcheck // either form
		}
		hs = append(hs, h.GetName()+"="+v)
	}
	var ts []string
	a := r.GetRoute()
	if c := a.GetCluster(); c != "" {
		ts = append(ts, c+"=1")
	}
	var total uint32
	for _, wc := range a.GetWeightedClusters().GetClusters() {
		total += wc.GetWeight().GetValue()
	}
	for _, wc := range a.GetWeightedClusters().GetClusters() {
		ts = append(ts, fmt.Sprintf("%s=%.2f", wc.GetName(), float64(wc.GetWeight().GetValue())/float64(total)))
	}
	return fmt.Sprintf("[%s] -> %s timeout %s", strings.Join(hs, ","), strings.Join(ts, ","), a.GetTimeout().AsDuration())
}

// meshClusterNames is the names of the mesh clusters st holds, sorted.
func meshClusterNames(st adsclient.State) []string {
	return slices.DeleteFunc(st.ClusterNames(), func(n string) bool { return !strings.Contains(n, ".internal.") })
}

func chainViewOf(st adsclient.State) chainView {
	v := chainView{endpoints: map[string][]string{}}
	for _, n := range st.RouteConfigNames() {
		for _, vh := range st.RouteConfig(n).GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				v.routes = append(v.routes, routeView(r))
			}
		}
	}
	for _, n := range st.ClusterNames() {
		if !strings.Contains(n, ".internal.") {
			continue // the local app's cluster, named by each server its own way
		}
		b, _ := protojson.Marshal(st.Cluster(n))
		var sni string
		if m := sniRE.FindStringSubmatch(string(b)); m != nil {
			sni = m[1]
		}
		sans := slices.Compact(slices.Sorted(slices.Values(spiffeRE.FindAllString(string(b), -1))))
		c := st.Cluster(n)
		view := fmt.Sprintf("%s sni=%s sans=%v lb=%v connect_timeout=%s", n, sni, sans, c.GetLbPolicy(), c.GetConnectTimeout().AsDuration())
		if ct := c.GetClusterType(); ct != nil {
			agg := &aggregatev3.ClusterConfig{}
			_ = ct.GetTypedConfig().UnmarshalTo(agg)
			view += fmt.Sprintf(" %s=%v", ct.GetName(), agg.GetClusters())
		}
		v.clusters = append(v.clusters, view)
		for _, ep := range st.Endpoints(n) {
			v.endpoints[n] = append(v.endpoints[n], ep.Address)
		}
	}
	return v
}

// TestMeshCanaryMatchesConsulXDS (issue 39): the canary in config entries
// (resolver subsets v1/v2, a 90/10 splitter, a router's header route)
// reaches web's sidecar through the bridge as through Consul 1.15.4's own
// xDS server for the same registrations and entries: the same routes
// (header route to v2 with its timeout, then v1 90 % / v2 10 %), the same
// subset clusters (v1.api.default.dc1.internal.TD: names, SNI, SANs, load
// balancer, connect timeout) and
// each subset cluster's endpoints the sidecar of the instance with its
// tag. Any other difference fails the test.
func TestMeshCanaryMatchesConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	registerCanary(t, agent)
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte("mesh {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
		c.Settings.Consul.ConfigEntries = true
	})
	roots, _, err := agent.Client().Connect().CARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := ir.MeshSubsetClusterName("v1", "api", "dc1", roots.TrustDomain), ir.MeshSubsetClusterName("v2", "api", "dc1", roots.TrustDomain)
	want := map[string][]string{v1: {apiSidecarAddr(t, agent, "api-1-sidecar-proxy")}, v2: {apiSidecarAddr(t, agent, "api-2-sidecar-proxy")}}
	dial := func(addr string) chainView {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: addr, NodeID: "web-sidecar-proxy", Cluster: "web", Mode: adsclient.Delta,
			InitialFetchTimeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		st, err := c.Wait(ctx, func(s adsclient.State) bool {
			v := chainViewOf(s)
			// Converged: a bridge that got the entries after the sidecar
			// connected moves it in steps, the old cluster going last.
			return len(v.routes) >= 2 && len(v.endpoints[v1]) > 0 && len(v.endpoints[v2]) > 0 &&
				slices.Equal(meshClusterNames(s), []string{v1, v2})
		})
		if err != nil {
			t.Fatalf("%s: %v\n%s", addr, err, c.Snapshot())
		}
		return chainViewOf(st)
	}
	consul, ours := dial(agent.GRPCAddr()), dial(h.daemon.XDSAddr().String())
	t.Logf("Consul: %+v", consul)
	t.Logf("bridge: %+v", ours)
	canary := fmt.Sprintf("[] -> %s=0.90,%s=0.10 timeout 0s", v1, v2)
	if !slices.Contains(consul.routes, canary) {
		t.Fatalf("Consul's own routes %v lack the 90/10 canary %q: the reference changed", consul.routes, canary)
	}
	if !slices.Equal(consul.routes, ours.routes) {
		t.Errorf("routes:\nConsul %q\nbridge %q", consul.routes, ours.routes)
	}
	if !slices.Equal(consul.clusters, ours.clusters) {
		t.Errorf("mesh clusters:\nConsul %q\nbridge %q", consul.clusters, ours.clusters)
	}
	for name, eps := range want {
		if !slices.Equal(consul.endpoints[name], eps) || !slices.Equal(ours.endpoints[name], eps) {
			t.Errorf("%s endpoints: want %v (its tag's sidecar); Consul %v, bridge %v", name, eps, consul.endpoints[name], ours.endpoints[name])
		}
	}
}

// TestMeshRedirectMatchesConsulXDS: a service-resolver redirect (api to
// api-new, whose resolver's default subset is blue) gives web's sidecar
// the same route, subset cluster, SNI, SANs (api-new's SPIFFE id) and
// endpoints (api-new's blue sidecar only) from the bridge as from Consul
// 1.15.4's own xDS server.
func TestMeshRedirectMatchesConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	sidecar := func() *api.AgentServiceConnect {
		return &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}
	}
	for _, reg := range []*api.AgentServiceRegistration{
		{Name: "web", Port: 8080, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Proxy: &api.AgentServiceConnectProxyConfig{Upstreams: []api.Upstream{{DestinationName: "api", LocalBindPort: 9191}}}}}},
		{Name: "api", Port: 9090, Connect: sidecar()},
		{Name: "api-new", ID: "api-new-blue", Port: 9094, Tags: []string{"blue"}, Connect: sidecar()},
		{Name: "api-new", ID: "api-new-green", Port: 9095, Tags: []string{"green"}, Connect: sidecar()},
	} {
		if err := agent.Client().Agent().ServiceRegister(reg); err != nil {
			t.Fatalf("register %s: %v", reg.Name, err)
		}
	}
	for _, e := range []api.ConfigEntry{
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api-new", Protocol: "http"},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", Redirect: &api.ServiceResolverRedirect{Service: "api-new"}},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api-new", DefaultSubset: "blue", Subsets: map[string]api.ServiceResolverSubset{
			"blue": {Filter: `"blue" in Service.Tags`}, "green": {Filter: `"green" in Service.Tags`}}},
	} {
		if _, _, err := agent.Client().ConfigEntries().Set(e, nil); err != nil {
			t.Fatalf("write %s/%s: %v", e.GetKind(), e.GetName(), err)
		}
	}
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte("mesh {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
		c.Settings.Consul.ConfigEntries = true
	})
	roots, _, err := agent.Client().Connect().CARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	blue := ir.MeshSubsetClusterName("blue", "api-new", "dc1", roots.TrustDomain)
	var blueAddr string
	svcs, _, err := agent.Client().Catalog().Service("api-new-sidecar-proxy", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs {
		if s.ServiceID == "api-new-blue-sidecar-proxy" {
			blueAddr = fmt.Sprintf("%s:%d", cmp.Or(s.ServiceAddress, s.Address), s.ServicePort)
		}
	}
	dial := func(addr string) chainView {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: addr, NodeID: "web-sidecar-proxy", Cluster: "web", Mode: adsclient.Delta, InitialFetchTimeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		st, err := c.Wait(ctx, func(s adsclient.State) bool {
			v := chainViewOf(s)
			return len(v.routes) >= 1 && len(v.endpoints[blue]) > 0
		})
		if err != nil {
			t.Fatalf("%s: %v\n%s", addr, err, c.Snapshot())
		}
		return chainViewOf(st)
	}
	consul, ours := dial(agent.GRPCAddr()), dial(h.daemon.XDSAddr().String())
	t.Logf("Consul: %+v", consul)
	t.Logf("bridge: %+v", ours)
	if !slices.Equal(consul.routes, ours.routes) {
		t.Errorf("routes:\nConsul %q\nbridge %q", consul.routes, ours.routes)
	}
	if !slices.Equal(consul.clusters, ours.clusters) {
		t.Errorf("mesh clusters:\nConsul %q\nbridge %q", consul.clusters, ours.clusters)
	}
	if want := []string{blueAddr}; !slices.Equal(consul.endpoints[blue], want) || !slices.Equal(ours.endpoints[blue], want) {
		t.Errorf("%s endpoints: want %v; Consul %v, bridge %v", blue, want, consul.endpoints[blue], ours.endpoints[blue])
	}
}

// TestMeshCanaryReachesAConnectedSidecar: the canary written while web's
// sidecar is connected reaches it in steps (subset clusters, then routes,
// then the old cluster goes) well within a step's timeout: every step is
// acknowledged, none is waited out.
func TestMeshCanaryReachesAConnectedSidecar(t *testing.T) {
	agent := consultest.Start(t)
	sidecar := func() *api.AgentServiceConnect {
		return &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}
	}
	for _, reg := range []*api.AgentServiceRegistration{
		{Name: "web", Port: 8080, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Proxy: &api.AgentServiceConnectProxyConfig{Upstreams: []api.Upstream{{DestinationName: "api", LocalBindPort: 9191}}}}}},
		{Name: "api", ID: "api-1", Port: 9090, Tags: []string{"v1"}, Connect: sidecar()},
		{Name: "api", ID: "api-2", Port: 9092, Tags: []string{"v2"}, Connect: sidecar()},
	} {
		if err := agent.Client().Agent().ServiceRegister(reg); err != nil {
			t.Fatalf("register %s: %v", reg.Name, err)
		}
	}
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte("mesh {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
		c.Settings.Consul.ConfigEntries = true
	})
	roots, _, err := agent.Client().Connect().CARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := ir.MeshClusterName("api", "dc1", roots.TrustDomain)
	v1, v2 := ir.MeshSubsetClusterName("v1", "api", "dc1", roots.TrustDomain), ir.MeshSubsetClusterName("v2", "api", "dc1", roots.TrustDomain)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var clients []*adsclient.Client
	for _, mode := range []adsclient.Mode{adsclient.Delta, adsclient.SotW} {
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: "web-sidecar-proxy", Cluster: "web", Mode: mode,
			InitialFetchTimeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := c.Wait(ctx, func(s adsclient.State) bool { return len(s.Endpoints(plain)) == 2 && len(s.ListenerNames()) == 2 }); err != nil {
			t.Fatalf("%v: before the canary: %v\n%s", mode, err, c.Snapshot())
		}
		clients = append(clients, c)
	}
	start := time.Now()
	registerCanary(t, agent)
	for i, c := range clients {
		_, err := c.Wait(ctx, func(s adsclient.State) bool {
			v := chainViewOf(s)
			return len(v.routes) == 2 && slices.Equal(meshClusterNames(s), []string{v1, v2})
		})
		if err != nil {
			t.Fatalf("client %d: the canary did not arrive: %v\n%s", i, err, c.Snapshot())
		}
	}
	// A step waited out takes StepTimeout (5 s); all three steps
	// acknowledged take a few round trips after Consul's answer.
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("the canary took %v to reach connected sidecars: a step was waited out instead of acknowledged", took)
	}
}
