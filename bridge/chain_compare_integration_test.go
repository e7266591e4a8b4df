package bridge_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/encoding/protojson"

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
	registerCanaryServices(t, agent)
	writeCanaryEntries(t, agent)
}

// registerCanaryServices registers web and api's two instances, v1 and v2.
func registerCanaryServices(t *testing.T, agent *consultest.Agent) {
	t.Helper()
	registerServices(t, agent, webWithUpstreams(api.Upstream{DestinationName: "api", LocalBindPort: 9191}),
		&api.AgentServiceRegistration{Name: "api", ID: "api-1", Port: 9090, Tags: []string{"v1"}, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "api", ID: "api-2", Port: 9092, Tags: []string{"v2"}, Connect: withSidecar()})
}

// writeCanaryEntries writes the canary's config entries.
func writeCanaryEntries(t *testing.T, agent *consultest.Agent) {
	t.Helper()
	writeEntries(t, agent,
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", DefaultSubset: "v1", ConnectTimeout: 3 * time.Second,
			LoadBalancer: &api.LoadBalancer{Policy: "least_request"}, Subsets: map[string]api.ServiceResolverSubset{
				"v1": {Filter: `"v1" in Service.Tags`}, "v2": {Filter: `"v2" in Service.Tags`}}},
		&api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: "api", Splits: []api.ServiceSplit{
			{Weight: 90, ServiceSubset: "v1"}, {Weight: 10, ServiceSubset: "v2"}}},
		&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "api", Routes: []api.ServiceRoute{{
			Match:       &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{Header: []api.ServiceRouteHTTPMatchHeader{{Name: "x-canary", Exact: "1"}}}},
			Destination: &api.ServiceRouteDestination{ServiceSubset: "v2", RequestTimeout: 2 * time.Second},
		}}})
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
	// A retry policy without a condition retries nothing (Envoy): Consul
	// writes one for a route with NumRetries alone, the bridge none.
	retry := ""
	if rp := a.GetRetryPolicy(); rp.GetRetryOn() != "" {
		retry = fmt.Sprintf(" retry %s/%d", rp.GetRetryOn(), rp.GetNumRetries().GetValue())
	}
	return fmt.Sprintf("[%s] -> %s timeout %s%s", strings.Join(hs, ","), strings.Join(ts, ","), a.GetTimeout().AsDuration(), retry)
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
	h := startEntriesBridge(t, agent, "mesh {}\n")
	td := trustDomain(t, agent)
	v1, v2 := ir.MeshSubsetClusterName("v1", "api", "dc1", td), ir.MeshSubsetClusterName("v2", "api", "dc1", td)
	want := map[string][]string{v1: {apiSidecarAddr(t, agent, "api-1-sidecar-proxy")}, v2: {apiSidecarAddr(t, agent, "api-2-sidecar-proxy")}}
	ready := func(s adsclient.State) bool {
		v := chainViewOf(s)
		// Converged: a bridge that got the entries after the sidecar
		// connected moves it in steps, the old cluster going last.
		return len(v.routes) >= 2 && len(v.endpoints[v1]) > 0 && len(v.endpoints[v2]) > 0 &&
			slices.Equal(meshClusterNames(s), []string{v1, v2})
	}
	consul := chainViewOf(webSidecarState(t, agent.GRPCAddr(), ready))
	ours := chainViewOf(webSidecarState(t, h.daemon.XDSAddr().String(), ready))
	canary := fmt.Sprintf("[] -> %s=0.90,%s=0.10 timeout 0s", v1, v2)
	if !slices.Contains(consul.routes, canary) {
		t.Fatalf("Consul's own routes %v lack the 90/10 canary %q: the reference changed", consul.routes, canary)
	}
	sameChain(t, consul, ours, want)
}

// TestMeshRedirectMatchesConsulXDS: a service-resolver redirect (api to
// api-new, whose resolver's default subset is blue) gives web's sidecar
// the same route, subset cluster, SNI, SANs (api-new's SPIFFE id) and
// endpoints (api-new's blue sidecar only) from the bridge as from Consul
// 1.15.4's own xDS server.
func TestMeshRedirectMatchesConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	registerServices(t, agent, webWithUpstreams(api.Upstream{DestinationName: "api", LocalBindPort: 9191}),
		&api.AgentServiceRegistration{Name: "api", Port: 9090, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "api-new", ID: "api-new-blue", Port: 9094, Tags: []string{"blue"}, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "api-new", ID: "api-new-green", Port: 9095, Tags: []string{"green"}, Connect: withSidecar()})
	writeEntries(t, agent,
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api-new", Protocol: "http"},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", Redirect: &api.ServiceResolverRedirect{Service: "api-new"}},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api-new", DefaultSubset: "blue", Subsets: map[string]api.ServiceResolverSubset{
			"blue": {Filter: `"blue" in Service.Tags`}, "green": {Filter: `"green" in Service.Tags`}}})
	h := startEntriesBridge(t, agent, "mesh {}\n")
	blue := ir.MeshSubsetClusterName("blue", "api-new", "dc1", trustDomain(t, agent))
	blueAddr := instanceSidecarAddr(t, agent, "api-new", "api-new-blue-sidecar-proxy")
	// The final state, not a step on the way to it: a bridge that first
	// served api before it had read api-new's sidecars reaches the
	// redirect in make-before-break steps (the blue cluster, then the
	// route, then api's cluster goes), and CI once compared the first.
	ready := func(s adsclient.State) bool {
		v := chainViewOf(s)
		toBlue := slices.ContainsFunc(v.routes, func(r string) bool { return strings.Contains(r, blue) })
		return toBlue && len(v.clusters) == 1 && len(v.endpoints[blue]) > 0
	}
	consul := chainViewOf(webSidecarState(t, agent.GRPCAddr(), ready))
	ours := chainViewOf(webSidecarState(t, h.daemon.XDSAddr().String(), ready))
	sameChain(t, consul, ours, map[string][]string{blue: {blueAddr}})
}

// TestMeshCanaryReachesAConnectedSidecar: the canary written while web's
// sidecar is connected reaches it in steps (subset clusters, then routes,
// then the old cluster goes) well within a step's timeout: every step is
// acknowledged, none is waited out.
func TestMeshCanaryReachesAConnectedSidecar(t *testing.T) {
	agent := consultest.Start(t)
	registerCanaryServices(t, agent)
	h := startEntriesBridge(t, agent, "mesh {}\n")
	td := trustDomain(t, agent)
	plain := ir.MeshClusterName("api", "dc1", td)
	v1, v2 := ir.MeshSubsetClusterName("v1", "api", "dc1", td), ir.MeshSubsetClusterName("v2", "api", "dc1", td)
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
	writeCanaryEntries(t, agent)
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
