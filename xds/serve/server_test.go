package serve

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// Fixtures: clusters (EDS over ADS) with one endpoint each, shared by all
// proxies, and for proxy group "edge" one listener "edge.http" on port
// routed by RDS "edge.http" to "api".

func fixtureADSSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

func fixtureAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

func fixtureAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func testOutput(t testing.TB, clusters []string, port uint32) *xds.Output {
	t.Helper()
	shared := &xds.Resources{}
	for i, name := range clusters {
		shared.Clusters = append(shared.Clusters, &clusterv3.Cluster{
			Name:                 name,
			ConnectTimeout:       durationpb.New(time.Second),
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: fixtureADSSource()},
		})
		shared.Endpoints = append(shared.Endpoints, &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: fixtureAddress("127.0.0.1", uint32(9000+i))}},
				HealthStatus:   corev3.HealthStatus_HEALTHY,
			}}}},
		})
	}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "edge_http",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    fixtureADSSource(),
			RouteConfigName: "edge.http",
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: fixtureAny(t, &routerv3.Router{})},
		}},
	}
	edge := &xds.Resources{
		Listeners: []*listenerv3.Listener{{
			Name:    "edge.http",
			Address: fixtureAddress("0.0.0.0", port),
			FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
				Name:       "envoy.filters.network.http_connection_manager",
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: fixtureAny(t, hcm)},
			}}}},
		}},
		Routes: []*routev3.RouteConfiguration{{
			Name: "edge.http",
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    "all",
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{
						ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "api"},
					}},
				}},
			}},
		}},
	}
	return shareAll(&xds.Output{Shared: shared, Groups: map[string]*xds.Resources{"edge": edge}})
}

// shareAll gives every node of out every cluster and endpoint (and
// upstream secret), as if every group reached everything: the tests of
// serving mechanics that do not care about scoping.
func shareAll(out *xds.Output) *xds.Output {
	out.Reach = map[string]*xds.Resources{}
	for g := range out.Groups {
		out.Reach[g] = out.Shared
	}
	out.ProxylessReach, out.Unmatched = out.Shared, out.Shared
	return out
}

func resolveEdge(nodeCluster string) string {
	if nodeCluster == "edge" {
		return "edge"
	}
	return ""
}

type testServer struct {
	*Server
	addr string
	// stuckCancel ends the stream stuckProxy opened.
	stuckCancel context.CancelFunc
}

// startServer serves s on a loopback port until the test ends.
func startServer(t *testing.T, cfg ServerConfig) *testServer {
	t.Helper()
	return startServerLogging(t, cfg, zerolog.NewTestWriter(t))
}

// startServerLogging is startServer logging warnings to w.
func startServerLogging(t *testing.T, cfg ServerConfig, w io.Writer) *testServer {
	t.Helper()
	cfg.Logger = zerolog.New(w).Level(zerolog.WarnLevel)
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = time.Second
	}
	s := NewServer(cfg)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testServer{Server: s, addr: lis.Addr().String()}
}

func (s *testServer) update(t *testing.T, out *xds.Output) {
	t.Helper()
	if _, err := s.Update(context.Background(), out, resolveEdge); err != nil {
		t.Fatal(err)
	}
}

// current is the version served to a node.cluster for a type.
func (s *testServer) current(nodeCluster, typeURL string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versionsOf(nodeCluster)[typeURL]
}

func (s *testServer) proxy(nodeID string) *ProxyStatus {
	for _, p := range s.Proxies() {
		if p.NodeID == nodeID {
			return &p
		}
	}
	return nil
}

// eventually polls cond; the deadline only guards against hangs.
func eventually(t *testing.T, what string, cond func() bool, describe func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; %s", what, describe())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *testServer) waitStatus(t *testing.T, nodeID, typ, status string) *ProxyStatus {
	t.Helper()
	var p *ProxyStatus
	eventually(t, nodeID+" "+typ+" "+status, func() bool {
		p = s.proxy(nodeID)
		return p != nil && p.Types[typ] != nil && p.Types[typ].Status == status
	}, func() string { return describeProxy(p) })
	return p
}

func describeProxy(p *ProxyStatus) string {
	if p == nil {
		return "proxy not connected"
	}
	str := "proxy " + p.Status + ":"
	for name, ts := range p.Types {
		str += " " + name + "=" + ts.Status + "(sent " + ts.VersionSent + "/" + ts.NonceSent + ", acked " + ts.VersionAcked + ")"
	}
	return str
}

func dial(t *testing.T, s *testServer, cfg adsclient.Config) *adsclient.Client {
	t.Helper()
	cfg.Addr = s.addr
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, cfg)
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

func grpcConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// rejectCluster NACKs any CDS response that carries a cluster named bad.
func rejectCluster(bad string) func(string, string, []*anypb.Any) error {
	return func(typeURL, _ string, resources []*anypb.Any) error {
		if typeURL != resourcev3.ClusterType {
			return nil
		}
		for _, a := range resources {
			c := new(clusterv3.Cluster)
			if err := a.UnmarshalTo(c); err == nil && c.GetName() == bad {
				return errors.New("cluster " + strconv.Quote(bad) + ": rejected by the test")
			}
		}
		return nil
	}
}

func responsesOf(c *adsclient.Client, typeURL string) []adsclient.ResponseInfo {
	var out []adsclient.ResponseInfo
	for _, r := range c.Responses() {
		if r.TypeURL == typeURL {
			out = append(out, r)
		}
	}
	return out
}
