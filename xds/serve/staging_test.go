package serve

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/irtest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// routeTo is the translation of group edge routing everything to target,
// with clusters for services, all of which the group gets (as if its
// upstreams listed them).
func routedTo(t *testing.T, target string, services ...string) *xds.Output {
	t.Helper()
	return routedToWith(t, nil, target, services...)
}

// routedToWith is routedTo with adjust applied to the model first.
func routedToWith(t *testing.T, adjust func(*ir.Model), target string, services ...string) *xds.Output {
	t.Helper()
	route := irtest.RouteTo("/", ir.WeightedCluster{Name: target, Weight: 1})
	route.Name = "all/0" // as the model names it: virtual host, position
	m := &ir.Model{Groups: []ir.Group{{Name: "edge", Listeners: []ir.Listener{irtest.HTTPListener("edge.http", route)}}}}
	for i, svc := range services {
		m.Clusters = append(m.Clusters, irtest.Cluster(svc, irtest.Endpoint(fmt.Sprintf("10.0.0.%d", i+1), 0, "dc1")))
	}
	irtest.Reach(m)
	m.Groups[0].Clusters = slices.Sorted(slices.Values(services))
	if adjust != nil {
		adjust(m)
	}
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// brokenRoutes lists what a state routes to that the proxy could not
// serve: a cluster it does not hold, or holds without endpoints (Envoy
// keeps such a cluster warming, and a route to it answers 503).
func brokenRoutes(st adsclient.State) []string {
	var broken []string
	for _, rcName := range st.RouteConfigNames() {
		for _, vh := range st.RouteConfig(rcName).GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				action := r.GetRoute()
				names := []string{action.GetCluster()}
				for _, w := range action.GetWeightedClusters().GetClusters() {
					names = append(names, w.GetName())
				}
				for _, n := range names {
					if n != "" && (st.Cluster(n) == nil || st.LoadAssignment(n) == nil) {
						broken = append(broken, rcName+" -> "+n)
					}
				}
			}
		}
	}
	return broken
}

// missingLeaf has every cluster present the certificate "leaf", which
// the bridge does not serve: translated, then taken out of the output,
// as a mesh leaf the per-VM agent serves is.
func missingLeaf(t *testing.T, target string, services ...string) *xds.Output {
	out := routedToWith(t, func(m *ir.Model) {
		m.Secrets = append(m.Secrets, irtest.CertSecret("leaf", "v"))
		for i := range m.Clusters {
			m.Clusters[i].TLS = &ir.UpstreamTLS{SNI: m.Clusters[i].Name + ".internal", CertificateSecret: "leaf"}
		}
	}, target, services...)
	for _, r := range append([]*xds.Resources{out.Shared}, slices.Collect(maps.Values(out.Reach))...) {
		r.Secrets = nil
	}
	return out
}

// withPort sets the port of every endpoint of out's clusters.
func withPort(out *xds.Output, port uint32) *xds.Output {
	for _, cla := range out.Shared.Endpoints {
		cla.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().PortSpecifier =
			&corev3.SocketAddress_PortValue{PortValue: port}
	}
	return out
}

// TestMakeBeforeBreak: whatever a route change does to clusters (move to
// a new one, add one beside, drop one), every state an Envoy-like client
// goes through routes only to clusters it holds with their endpoints: new
// clusters and their endpoints come first, the routes next, removed
// clusters last. Each step waits for the proxy's answers, not for the
// timeout. "other endpoints change" is the same move built together with
// a health change elsewhere: a SotW EDS response carrying only that change
// must not count as the proxy holding the new cluster's endpoints.
func TestMakeBeforeBreak(t *testing.T) {
	for name, tc := range map[string]struct {
		before, after func(t *testing.T) *xds.Output
		want          string   // where the route ends up
		clusters      []string // what the proxy ends up holding
		// noWarmWait asks for listeners at once, as an Envoy does once
		// initial_fetch_timeout passes with clusters still warming.
		noWarmWait bool
	}{
		"move": {
			func(t *testing.T) *xds.Output { return routedTo(t, "api", "api") },
			func(t *testing.T) *xds.Output { return routedTo(t, "web", "web") },
			"web", []string{"web"}, false,
		},
		"add": {
			func(t *testing.T) *xds.Output { return routedTo(t, "api", "api") },
			func(t *testing.T) *xds.Output { return routedTo(t, "web", "api", "web") },
			"web", []string{"api", "web"}, false,
		},
		"remove": {
			func(t *testing.T) *xds.Output { return routedTo(t, "web", "api", "web") },
			func(t *testing.T) *xds.Output { return routedTo(t, "api", "api") },
			"api", []string{"api"}, false,
		},
		// The proxy wants a secret the bridge does not have (a leaf
		// not issued yet): a delta stream is never sent it, nor anything
		// else of SDS, and still lacks nothing it can be given.
		"secret not there": {
			func(t *testing.T) *xds.Output { return missingLeaf(t, "api", "api") },
			func(t *testing.T) *xds.Output { return missingLeaf(t, "web", "web") },
			"web", []string{"web"}, true,
		},
		"other endpoints change": {
			func(t *testing.T) *xds.Output { return routedTo(t, "api", "api", "db") },
			func(t *testing.T) *xds.Output { return withPort(routedTo(t, "web", "db", "web"), 9999) },
			"web", []string{"db", "web"}, false,
		},
	} {
		for _, mode := range []adsclient.Mode{adsclient.SotW, adsclient.Delta} {
			t.Run(name+"/"+mode.String(), func(t *testing.T) {
				s := startServer(t, ServerConfig{})
				s.update(t, tc.before(t))
				var mu sync.Mutex
				var broken []string
				states := 0
				var fetch time.Duration
				if tc.noWarmWait {
					fetch = -1
				}
				c := dial(t, s, adsclient.Config{NodeID: "edge-1", Cluster: "edge", Mode: mode, InitialFetchTimeout: fetch, OnUpdate: func(u adsclient.Update) {
					mu.Lock()
					defer mu.Unlock()
					states++
					if len(u.State.ListenerNames()) > 0 {
						broken = append(broken, brokenRoutes(u.State)...)
					}
				}})
				if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return st.RouteConfig("edge.http") != nil }); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				s.update(t, tc.after(t))
				ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second) // under the 5s step timeout
				defer cancel()
				if _, err := c.Wait(ctx, func(st adsclient.State) bool {
					rc := st.RouteConfig("edge.http")
					return rc != nil && rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster() == tc.want &&
						slices.Equal(st.ClusterNames(), tc.clusters)
				}); err != nil {
					t.Fatalf("the change did not complete before the step timeout: %v", err)
				}
				t.Logf("done in %v", time.Since(start))
				mu.Lock()
				defer mu.Unlock()
				if len(broken) > 0 {
					t.Errorf("in %d states the proxy routed to clusters it could not serve: %v", states, broken)
				}
				if got := testutil.ToFloat64(s.metrics.stagingTimeouts); got != 0 {
					t.Errorf("%v steps timed out, want 0: each step waits for the proxy's answer", got)
				}
			})
		}
	}
}

// TestMakeBeforeBreakKeyGoneMidStep: the last proxy of a node.cluster
// leaving while its update waits in a step ends the wait; nothing fires
// on the forgotten key later, and the server goes on serving.
func TestMakeBeforeBreakKeyGoneMidStep(t *testing.T) {
	s := startServer(t, ServerConfig{StepTimeout: 100 * time.Millisecond})
	s.update(t, routedTo(t, "api", "api"))
	c := dial(t, s, adsclient.Config{NodeID: "edge-1", Cluster: "edge", Mode: adsclient.SotW})
	if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return st.RouteConfig("edge.http") != nil }); err != nil {
		t.Fatal(err)
	}
	stuckProxy(t, s)
	s.update(t, routedTo(t, "web", "web"))
	s.mu.Lock()
	staged := len(s.staged)
	s.mu.Unlock()
	if staged != 1 {
		t.Fatalf("%d keys staged, want edge's", staged)
	}
	_ = c.Close()
	s.closeStuck(t)
	eventually(t, "edge to be forgotten", func() bool { return s.cache.Served("edge") == nil }, func() string { return "still served" })
	s.mu.Lock()
	staged = len(s.staged)
	s.mu.Unlock()
	if staged != 0 {
		t.Errorf("%d keys still staged after their last stream left", staged)
	}
	time.Sleep(300 * time.Millisecond) // past the step timeout
	again := dial(t, s, adsclient.Config{NodeID: "edge-2", Cluster: "edge", Mode: adsclient.Delta})
	if _, err := again.Wait(waitCtx(t), func(st adsclient.State) bool {
		rc := st.RouteConfig("edge.http")
		return rc != nil && rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster() == "web"
	}); err != nil {
		t.Fatalf("a proxy reconnecting after the key was forgotten: %v", err)
	}
}

// TestMakeBeforeBreakDoesNotWaitForeverForAStuckProxy: a proxy of the
// node.cluster that never acknowledges holds each step only until the
// step timeout; the others complete the move, and the wait is counted.
func TestMakeBeforeBreakDoesNotWaitForeverForAStuckProxy(t *testing.T) {
	s := startServer(t, ServerConfig{StepTimeout: 200 * time.Millisecond})
	s.update(t, routedTo(t, "api", "api"))
	good := dial(t, s, adsclient.Config{NodeID: "edge-1", Cluster: "edge", Mode: adsclient.Delta})
	if _, err := good.Wait(waitCtx(t), func(st adsclient.State) bool { return st.RouteConfig("edge.http") != nil }); err != nil {
		t.Fatal(err)
	}
	stuckProxy(t, s) // takes clusters once and never answers again

	s.update(t, routedTo(t, "web", "web"))
	if _, err := good.Wait(waitCtx(t), func(st adsclient.State) bool {
		rc := st.RouteConfig("edge.http")
		return rc != nil && rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster() == "web" && !slices.Contains(st.ClusterNames(), "api")
	}); err != nil {
		t.Fatalf("the move did not complete past a stuck proxy: %v", err)
	}
	if got := testutil.ToFloat64(s.metrics.stagingTimeouts); got < 1 {
		t.Errorf("step timeouts = %v, want at least 1 (the stuck proxy never ACKed the new clusters)", got)
	}
}

// TestConfigDumpShowsRouteSources: the dump says where each served route
// is declared, which no resource carries.
func TestConfigDumpShowsRouteSources(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, routedTo(t, "api", "api"))
	d, err := s.ConfigDump("", "edge")
	if err != nil {
		t.Fatal(err)
	}
	if got := d.RouteSources["edge.http/all/0"]; got != "test.hcl:/" {
		t.Errorf("route_sources = %v, want edge.http/all/0 at test.hcl:/", d.RouteSources)
	}
	if d, _ := s.ConfigDump("", "no-group"); len(d.RouteSources) != 0 {
		t.Errorf("a node in no group has route sources %v", d.RouteSources)
	}
}

// TestMakeBeforeBreakDuringChurn: endpoint changes arriving while a move
// is under way (a busy catalog) do not restart its steps' deadline: with a
// proxy that never answers, the move still completes for the others while
// the churn goes on, and no state of theirs routes to a cluster they
// cannot serve.
func TestMakeBeforeBreakDuringChurn(t *testing.T) {
	const step = 300 * time.Millisecond
	s := startServer(t, ServerConfig{StepTimeout: step})
	s.update(t, routedTo(t, "api", "api"))
	var mu sync.Mutex
	var broken []string
	good := dial(t, s, adsclient.Config{NodeID: "edge-1", Cluster: "edge", Mode: adsclient.SotW, OnUpdate: func(u adsclient.Update) {
		mu.Lock()
		defer mu.Unlock()
		if len(u.State.ListenerNames()) > 0 {
			broken = append(broken, brokenRoutes(u.State)...)
		}
	}})
	if _, err := good.Wait(waitCtx(t), func(st adsclient.State) bool { return st.RouteConfig("edge.http") != nil }); err != nil {
		t.Fatal(err)
	}
	// A proxy of the same node.cluster that takes clusters and then never
	// answers: every step waits for it until the deadline.
	stuckProxy(t, s)

	var outs []*xds.Output
	for i := range 60 { // 60 × 20ms: four step deadlines of churn
		outs = append(outs, withPort(routedTo(t, "web", "api", "web"), uint32(9000+i)))
	}
	moved := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		if _, err := good.Wait(waitCtx(t), func(st adsclient.State) bool {
			rc := st.RouteConfig("edge.http")
			return rc != nil && rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster() == "web"
		}); err == nil {
			moved <- time.Since(start)
		}
	}()
	for _, out := range outs {
		if _, err := s.Update(context.Background(), out, resolveEdge); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	churn := time.Since(start)
	select {
	case took := <-moved:
		if took > churn {
			t.Errorf("the move took %v, after the churn ended (%v): the steps' deadline restarted with every update", took, churn)
		}
		t.Logf("moved after %v of %v churn (step timeout %v)", took, churn, step)
	case <-time.After(5 * time.Second):
		t.Fatalf("the move did not complete within 5s after %v of churn", churn)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(broken) > 0 {
		t.Errorf("states routed to clusters the proxy could not serve: %v", broken)
	}
}

// stuckProxy connects node edge-stuck of node.cluster edge over ADS: it
// takes and ACKs clusters once, then never answers again (until
// closeStuck).
func stuckProxy(t *testing.T, s *testServer) {
	t.Helper()
	ctx, cancel := context.WithCancel(waitCtx(t))
	s.stuckCancel = cancel
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(grpcConn(t, s.addr)).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "edge-stuck", Cluster: "edge"}
	if err := ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	first, err := ads.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType, VersionInfo: first.GetVersionInfo(), ResponseNonce: first.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	s.waitStatus(t, "edge-stuck", "CDS", StatusSynced)
}

// TestMakeBeforeBreakPerTypeStreams: an Envoy on per-type SotW streams
// (CDS, EDS and RDS apart) gets the same order: the route to the new
// cluster only after it acknowledged that cluster and its endpoints, and
// the old cluster's removal only after it acknowledged that route.
func TestMakeBeforeBreakPerTypeStreams(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, routedTo(t, "api", "api"))
	conn := grpcConn(t, s.addr)
	node := &corev3.Node{Id: "edge-pt", Cluster: "edge"}
	cds, err := clusterservice.NewClusterDiscoveryServiceClient(conn).StreamClusters(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	eds, err := endpointservice.NewEndpointDiscoveryServiceClient(conn).StreamEndpoints(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	rds, err := routeservice.NewRouteDiscoveryServiceClient(conn).StreamRoutes(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	fetchSotW(t, cds, node, resourcev3.ClusterType, nil)
	fetchSotW(t, eds, node, resourcev3.EndpointType, []string{"api"})
	fetchSotW(t, rds, node, resourcev3.RouteType, []string{"edge.http"})

	type got struct {
		resp *discoveryv3.DiscoveryResponse
		at   time.Time
	}
	routes := make(chan got, 4)
	go func() {
		for {
			r, err := rds.Recv()
			if err != nil {
				return
			}
			routes <- got{r, time.Now()}
		}
	}()
	s.update(t, routedTo(t, "web", "web"))

	// Step 1: clusters api and web; the proxy asks for web's endpoints.
	c1, err := cds.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if names := hashes(t, c1.GetResources()); len(names) != 2 {
		t.Fatalf("first CDS after the move has %v, want api and web side by side", names)
	}
	time.Sleep(200 * time.Millisecond) // a slow proxy: nothing may route to web yet
	select {
	case r := <-routes:
		t.Fatalf("route configuration %s sent before the proxy acknowledged the new cluster", r.resp.GetVersionInfo())
	default:
	}
	clusters := make(chan *discoveryv3.DiscoveryResponse, 4)
	go func() {
		for {
			c, err := cds.Recv()
			if err != nil {
				return
			}
			clusters <- c
		}
	}()
	fetchSotW(t, eds, node, resourcev3.EndpointType, []string{"api", "web"})
	ackedAt := time.Now()
	if err := cds.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType, VersionInfo: c1.GetVersionInfo(), ResponseNonce: c1.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	// Step 2: the route, once clusters and endpoints are acknowledged.
	var r got
	select {
	case r = <-routes:
	case <-time.After(4 * time.Second):
		t.Fatal("no new route configuration after the proxy acknowledged the new cluster")
	}
	if r.at.Before(ackedAt) {
		t.Fatal("route configuration arrived before the cluster ACK")
	}
	// Step 3 waits for the route ACK: api is still there until then.
	time.Sleep(200 * time.Millisecond)
	select {
	case c := <-clusters:
		t.Fatalf("CDS %v sent before the proxy acknowledged the route that stopped using api", hashes(t, c.GetResources()))
	default:
	}
	if err := rds.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.RouteType, ResourceNames: []string{"edge.http"}, VersionInfo: r.resp.GetVersionInfo(), ResponseNonce: r.resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	var c2 *discoveryv3.DiscoveryResponse
	select {
	case c2 = <-clusters:
	case <-time.After(4 * time.Second):
		t.Fatal("api was never removed after the route ACK")
	}
	if names := hashes(t, c2.GetResources()); len(names) != 1 || names["web"] == "" {
		t.Fatalf("CDS after the route ACK has %v, want web alone", names)
	}
}

// closeStuck ends the stuck proxy's stream.
func (s *testServer) closeStuck(t *testing.T) {
	t.Helper()
	if s.stuckCancel != nil {
		s.stuckCancel()
	}
}

// TestMakeBeforeBreakDoesNotWaitForEndpointsOfRejectedClusters: a proxy
// that NACKs the new clusters will never ask for their endpoints; the step
// goes on at once rather than waiting out its timeout.
func TestMakeBeforeBreakDoesNotWaitForEndpointsOfRejectedClusters(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, routedTo(t, "api", "api"))
	c := dial(t, s, adsclient.Config{NodeID: "edge-1", Cluster: "edge", Mode: adsclient.SotW,
		NACK: func(typeURL, _ string, resources []*anypb.Any) error {
			if typeURL == adsclient.ClusterType && len(resources) > 1 {
				return errors.New("rejecting the new cluster")
			}
			return nil
		}})
	if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return st.RouteConfig("edge.http") != nil }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.update(t, routedTo(t, "web", "api", "web"))
	s.waitStatus(t, "edge-1", "CDS", StatusNACKed)
	eventually(t, "the steps to end", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.staged) == 0
	}, func() string { return "still staged" })
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("steps took %v after a CDS NACK, want no wait for endpoints never asked for", took)
	}
	if got := testutil.ToFloat64(s.metrics.stagingTimeouts); got != 0 {
		t.Errorf("%v steps timed out, want 0", got)
	}
}
