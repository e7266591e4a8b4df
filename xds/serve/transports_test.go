package serve

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// sotwClientStream and deltaClientStream are what every SotW or delta xDS stream
// looks like, ADS or per type.
type sotwClientStream interface {
	Send(*discoveryv3.DiscoveryRequest) error
	Recv() (*discoveryv3.DiscoveryResponse, error)
}

type deltaClientStream interface {
	Send(*discoveryv3.DeltaDiscoveryRequest) error
	Recv() (*discoveryv3.DeltaDiscoveryResponse, error)
}

// hashes maps resource name to a hash of its deterministic encoding.
func hashes(t *testing.T, res []*anypb.Any) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range res {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		out[resourceName(m)] = fmt.Sprintf("%x", sha256.Sum256(b))
	}
	return out
}

func resourceName(m proto.Message) string {
	type named interface{ GetName() string }
	type clusterNamed interface{ GetClusterName() string }
	switch r := m.(type) {
	case clusterNamed:
		return r.GetClusterName()
	case named:
		return r.GetName()
	}
	return ""
}

// fetchSotW subscribes one type on a SotW stream and returns the first
// response's resources by hash, ACKing it.
func fetchSotW(t *testing.T, s sotwClientStream, node *corev3.Node, typeURL string, names []string) (*discoveryv3.DiscoveryResponse, map[string]string) {
	t.Helper()
	if err := s.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeURL, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetTypeUrl() != typeURL {
		t.Fatalf("asked for %s, got %s", typeURL, resp.GetTypeUrl())
	}
	if err := s.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeURL, ResourceNames: names, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	return resp, hashes(t, resp.GetResources())
}

func fetchDelta(t *testing.T, s deltaClientStream, node *corev3.Node, typeURL string, names []string) map[string]string {
	t.Helper()
	if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: typeURL, ResourceNamesSubscribe: names}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: typeURL, ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	var res []*anypb.Any
	for _, r := range resp.GetResources() {
		res = append(res, r.GetResource())
	}
	return hashes(t, res)
}

// TestFourTransportVariantsServeTheSameContent connects a client of each
// kind the xDS protocol defines — SotW per-type streams, SotW ADS, delta
// per-type streams, delta ADS — as the same node and compares every
// resource by name and content hash.
func TestFourTransportVariantsServeTheSameContent(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api", "web"}, 8080))
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	node := &corev3.Node{Id: "variants", Cluster: "edge"}
	types := []struct {
		url   string
		names []string // nil: wildcard
	}{
		{resourcev3.ClusterType, nil},
		{resourcev3.EndpointType, []string{"api", "web"}},
		{resourcev3.ListenerType, nil},
		{resourcev3.RouteType, []string{"edge.http"}},
	}
	got := map[string]map[string]map[string]string{} // variant -> type -> name -> hash

	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got["SotW ADS"] = map[string]map[string]string{}
	for _, ty := range types {
		_, got["SotW ADS"][ty.url] = fetchSotW(t, ads, node, ty.url, ty.names)
	}

	dads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got["delta ADS"] = map[string]map[string]string{}
	for _, ty := range types {
		got["delta ADS"][ty.url] = fetchDelta(t, dads, node, ty.url, ty.names)
	}

	got["SotW per type"] = map[string]map[string]string{}
	got["delta per type"] = map[string]map[string]string{}
	for _, ty := range types {
		var ss sotwClientStream
		var ds deltaClientStream
		var err1, err2 error
		switch ty.url {
		case resourcev3.ClusterType:
			ss, err1 = clusterservice.NewClusterDiscoveryServiceClient(conn).StreamClusters(ctx)
			ds, err2 = clusterservice.NewClusterDiscoveryServiceClient(conn).DeltaClusters(ctx)
		case resourcev3.EndpointType:
			ss, err1 = endpointservice.NewEndpointDiscoveryServiceClient(conn).StreamEndpoints(ctx)
			ds, err2 = endpointservice.NewEndpointDiscoveryServiceClient(conn).DeltaEndpoints(ctx)
		case resourcev3.ListenerType:
			ss, err1 = listenerservice.NewListenerDiscoveryServiceClient(conn).StreamListeners(ctx)
			ds, err2 = listenerservice.NewListenerDiscoveryServiceClient(conn).DeltaListeners(ctx)
		case resourcev3.RouteType:
			ss, err1 = routeservice.NewRouteDiscoveryServiceClient(conn).StreamRoutes(ctx)
			ds, err2 = routeservice.NewRouteDiscoveryServiceClient(conn).DeltaRoutes(ctx)
		}
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		_, got["SotW per type"][ty.url] = fetchSotW(t, ss, node, ty.url, ty.names)
		got["delta per type"][ty.url] = fetchDelta(t, ds, node, ty.url, ty.names)
	}

	want := got["SotW ADS"]
	for _, ty := range types {
		if len(want[ty.url]) == 0 {
			t.Fatalf("SotW ADS got no %s", ty.url)
		}
	}
	for _, variant := range slices.Sorted(maps.Keys(got)) {
		for _, ty := range types {
			if !maps.Equal(got[variant][ty.url], want[ty.url]) {
				t.Errorf("%s %s differs from SotW ADS:\n got %v\nwant %v", variant, ty.url, got[variant][ty.url], want[ty.url])
			}
		}
	}
}

// TestSubscriptionSemantics: named EDS subscriptions get only their names;
// an unchanged version gets no response; an unsubscribed name gets no more
// updates; a new stream (reconnect) gets the current state at once.
func TestSubscriptionSemantics(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api", "web"}, 8080))
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	node := &corev3.Node{Id: "subs", Cluster: "edge"}

	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, eds := fetchSotW(t, stream, node, resourcev3.EndpointType, []string{"api"})
	if !slices.Equal(slices.Sorted(maps.Keys(eds)), []string{"api"}) {
		t.Fatalf("named subscription to api returned %v", slices.Sorted(maps.Keys(eds)))
	}
	recv := make(chan *discoveryv3.DiscoveryResponse, 4)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				close(recv)
				return
			}
			recv <- r
		}
	}()

	// The same content again: no response.
	s.update(t, testOutput(t, []string{"api", "web"}, 8080))
	select {
	case r := <-recv:
		t.Fatalf("response for an unchanged version: %s %s", r.GetTypeUrl(), r.GetVersionInfo())
	case <-time.After(300 * time.Millisecond):
	}

	// Unsubscribe from api (an empty name list would mean wildcard, so
	// subscribe to web instead), then change only api: nothing may arrive
	// for it.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"web"}, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	r := <-recv
	if names := slices.Sorted(maps.Keys(hashes(t, r.GetResources()))); !slices.Equal(names, []string{"web"}) {
		t.Fatalf("after switching to web got %v", names)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"web"}, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	changed := testOutput(t, []string{"api", "web"}, 8080)
	changed.Shared.Endpoints[0].Endpoints[0].LbEndpoints[0].HealthStatus = corev3.HealthStatus_UNHEALTHY // api
	s.update(t, changed)
	select {
	case r := <-recv:
		for name := range hashes(t, r.GetResources()) {
			if name == "api" {
				t.Fatalf("update for unsubscribed api arrived (version %s)", r.GetVersionInfo())
			}
		}
	case <-time.After(300 * time.Millisecond):
	}

	// Reconnect: a new stream gets the current state, api included.
	stream2, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp2, eds2 := fetchSotW(t, stream2, node, resourcev3.EndpointType, []string{"api"})
	cur := hashes(t, []*anypb.Any{fixtureAny(t, changed.Shared.Endpoints[0])})
	if eds2["api"] != cur["api"] || resp2.GetVersionInfo() == resp.GetVersionInfo() {
		t.Fatalf("re-subscription after reconnect did not get the current api endpoints (version %s)", resp2.GetVersionInfo())
	}
}
