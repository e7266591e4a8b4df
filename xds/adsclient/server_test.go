package adsclient

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

const testNode = "node-1"

// event is one message on the wire as the server saw it, in one log for
// both directions so ordering can be asserted.
type event struct {
	response    bool
	typ         string
	version     string // SotW version_info (both directions) or Delta system_version_info
	nonce       string // response nonce, or the request's response_nonce
	errorDetail string
	node        string
	names       []string // SotW resource_names or Delta resource_names_subscribe
	unsubscribe []string
}

// testServer is a go-control-plane ADS server on a loopback port, the same
// stack the bridge serves with.
type testServer struct {
	cache cachev3.SnapshotCache
	addr  string

	mu     sync.Mutex
	events []event
}

func startServer(t *testing.T) *testServer {
	t.Helper()
	return startServerADS(t, true)
}

// startServerADS starts a server whose cache is in go-control-plane's ADS
// mode (a named SotW request is answered only once it names every
// resource of its type) or not, as the bridge's is; opts are the gRPC
// server's.
func startServerADS(t *testing.T, ads bool, opts ...grpc.ServerOption) *testServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &testServer{cache: cachev3.NewSnapshotCache(ads, cachev3.IDHash{}, nil)}
	cb := serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
			s.add(event{
				typ: r.GetTypeUrl(), version: r.GetVersionInfo(), nonce: r.GetResponseNonce(),
				errorDetail: r.GetErrorDetail().GetMessage(), node: r.GetNode().GetId(),
				names: r.GetResourceNames(),
			})
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discoveryv3.DiscoveryRequest, r *discoveryv3.DiscoveryResponse) {
			s.add(event{response: true, typ: r.GetTypeUrl(), version: r.GetVersionInfo(), nonce: r.GetNonce()})
		},
		StreamDeltaRequestFunc: func(_ int64, r *discoveryv3.DeltaDiscoveryRequest) error {
			s.add(event{
				typ: r.GetTypeUrl(), nonce: r.GetResponseNonce(),
				errorDetail: r.GetErrorDetail().GetMessage(), node: r.GetNode().GetId(),
				names: r.GetResourceNamesSubscribe(), unsubscribe: r.GetResourceNamesUnsubscribe(),
			})
			return nil
		},
		StreamDeltaResponseFunc: func(_ int64, _ *discoveryv3.DeltaDiscoveryRequest, r *discoveryv3.DeltaDiscoveryResponse) {
			s.add(event{response: true, typ: r.GetTypeUrl(), version: r.GetSystemVersionInfo(), nonce: r.GetNonce()})
		},
	}
	gs := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(ctx, s.cache, cb))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() {
		cancel()
		gs.Stop()
	})
	return s
}

func (s *testServer) add(e event) {
	// The slices come from messages the server keeps using.
	e.names = append([]string(nil), e.names...)
	e.unsubscribe = append([]string(nil), e.unsubscribe...)
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}

func (s *testServer) log() []event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event(nil), s.events...)
}

func (s *testServer) set(t *testing.T, snap *cachev3.Snapshot) {
	t.Helper()
	if err := s.cache.SetSnapshot(context.Background(), testNode, snap); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond over the server's log; the deadline only guards
// against hangs.
func (s *testServer) eventually(t *testing.T, what string, cond func([]event) bool) []event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev := s.log()
		if cond(ev) {
			return ev
		}
		if time.Now().After(deadline) {
			t.Fatalf("server never saw %s; wire log:\n%s", what, dump(ev))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func dump(ev []event) string {
	var b strings.Builder
	for _, e := range ev {
		dir := "request "
		if e.response {
			dir = "response"
		}
		fmt.Fprintf(&b, "%s %s v=%q nonce=%q names=%q", dir, shortType(e.typ), e.version, e.nonce, e.names)
		if len(e.unsubscribe) > 0 {
			fmt.Fprintf(&b, " unsubscribe=%q", e.unsubscribe)
		}
		if e.errorDetail != "" {
			fmt.Fprintf(&b, " error=%q", e.errorDetail)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func shortType(t string) string { return t[strings.LastIndex(t, ".")+1:] }

// Fixtures. Cluster "api" uses an EDS service_name to exercise that path;
// the others use their own name.

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

func serviceName(cluster string) string {
	if cluster == "api" {
		return "api-eds"
	}
	return cluster
}

func makeCluster(name string) *clusterv3.Cluster {
	cfg := &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()}
	if sn := serviceName(name); sn != name {
		cfg.ServiceName = sn
	}
	return &clusterv3.Cluster{
		Name:                 name,
		ConnectTimeout:       durationpb.New(time.Second),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     cfg,
	}
}

func socketAddress(hostPort string) *corev3.Address {
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		panic(err)
	}
	p, _ := strconv.Atoi(port)
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
	}}}
}

func makeLoadAssignment(name string, addrs []string) *endpointv3.ClusterLoadAssignment {
	loc := &endpointv3.LocalityLbEndpoints{}
	for _, a := range addrs {
		loc.LbEndpoints = append(loc.LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socketAddress(a)}},
			HealthStatus:   corev3.HealthStatus_HEALTHY,
		})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{loc}}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

func makeListener(name, route string) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "ingress_http",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: route,
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
	return &listenerv3.Listener{
		Name:    name,
		Address: socketAddress("0.0.0.0:10000"),
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name:       "envoy.filters.network.http_connection_manager",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
		}}}},
	}
}

func makeRoute(name, cluster string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{
		Name: name,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "all",
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
				}},
			}},
		}},
	}
}

// makeSnapshot builds one listener "http" routed by "local_route" and an
// EDS cluster per key of endpoints, with a ClusterLoadAssignment each.
func makeSnapshot(t *testing.T, version string, endpoints map[string][]string, extra ...*clusterv3.Cluster) *cachev3.Snapshot {
	t.Helper()
	res := map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: {makeListener("http", "local_route")},
		resourcev3.RouteType:    {makeRoute("local_route", "api")},
	}
	for name, addrs := range endpoints {
		res[resourcev3.ClusterType] = append(res[resourcev3.ClusterType], makeCluster(name))
		res[resourcev3.EndpointType] = append(res[resourcev3.EndpointType], makeLoadAssignment(serviceName(name), addrs))
	}
	for _, c := range extra {
		res[resourcev3.ClusterType] = append(res[resourcev3.ClusterType], c)
	}
	snap, err := cachev3.NewSnapshot(version, res)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func dial(t *testing.T, s *testServer, cfg Config) *Client {
	t.Helper()
	cfg.Addr = s.addr
	cfg.NodeID = testNode
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
