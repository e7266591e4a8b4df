package agent_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/procstat"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// standIn stands in for the central bridge where a test needs a world the
// policy language cannot easily make (a 5 MB listener) or a refusal: the
// project's own xDS server (the central's, with its 64 MiB send limit)
// in relay mode, serving each node.cluster world(cluster).
type standIn struct {
	srv  *serve.Server
	addr string

	mu    sync.Mutex
	world func(cluster string) *xds.Resources
	keys  map[string]string // key -> node.cluster
}

func startStandIn(t *testing.T, allow func(*corev3.Node) error, world func(cluster string) *xds.Resources) *standIn {
	t.Helper()
	return startStandInOn(t, nil, allow, world)
}

// startStandInOn is startStandIn whose listener wrap wraps (nil: as is).
func startStandInOn(t *testing.T, wrap func(net.Listener) net.Listener, allow func(*corev3.Node) error, world func(cluster string) *xds.Resources) *standIn {
	t.Helper()
	s := &standIn{world: world, keys: map[string]string{}}
	s.srv = serve.NewServer(serve.ServerConfig{Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), Relay: true, AllowNode: allow,
		OnKey: func(k serve.RelayKey) {
			s.mu.Lock()
			s.keys[k.Key] = k.NodeCluster
			w := s.world
			s.mu.Unlock()
			if _, err := s.srv.SetRelay(k.Key, w(k.NodeCluster)); err != nil {
				t.Errorf("stand-in: %v", err)
			}
		}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	if wrap != nil {
		l = wrap(l)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// set serves every key the world of world from now on.
func (s *standIn) set(t *testing.T, world func(cluster string) *xds.Resources) {
	t.Helper()
	s.mu.Lock()
	s.world = world
	keys := make(map[string]string, len(s.keys))
	for k, c := range s.keys {
		keys[k] = c
	}
	s.mu.Unlock()
	for k, c := range keys {
		if _, err := s.srv.SetRelay(k, world(c)); err != nil {
			t.Fatal(err)
		}
	}
}

// bigWorld is a cluster with one endpoint (port) and a listener of about
// size bytes (its metadata), group.http.
func bigWorld(size int, port uint32) func(string) *xds.Resources {
	pad, _ := structpb.NewStruct(map[string]any{"pad": strings.Repeat("x", size)})
	return func(group string) *xds.Resources {
		ads := &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}
		return &xds.Resources{
			Clusters: []*clusterv3.Cluster{{Name: "big", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
				EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads}, ConnectTimeout: nil}},
			Endpoints: []*endpointv3.ClusterLoadAssignment{{ClusterName: "big", Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
					SocketAddress: &corev3.SocketAddress{Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}}},
			}}}}}},
			Listeners: []*listenerv3.Listener{{Name: group + ".http", Metadata: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"pad": pad}},
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080}}}}}},
		}
	}
}

// rssBytes is this process's resident set (Linux), 0 if unknown.
func rssBytes() int64 {
	n, _ := procstat.RSS(0)
	return n
}

// endpointAddr is the address of cluster big's endpoint(s).
func endpointAddr(s adsclient.State) string { h, _, _ := strings.Cut(health(s, "big"), "="); return h }

// TestAgentRelaysFiveMBListener (issue 36, 6): a 5 MB listener (over
// gRPC's 4 MiB default, under the central's 64 MiB) reaches a local proxy
// through the agent, endpoint changes keep flowing, /readyz is ready and
// the agent does not reconnect.
func TestAgentRelaysFiveMBListener(t *testing.T) {
	cen := startStandIn(t, nil, bigWorld(5<<20, 1001))
	ag := startAgent(t, t.TempDir(), cen.addr)
	proxy := dial(t, "unix://"+ag.SocketAddr().String(), "edge-big", adsclient.Delta)
	wait(t, proxy, "the 5 MB listener and its endpoints through the agent", 30*time.Second, func(s adsclient.State) bool {
		return s.Listener("edge-big.http") != nil && endpointAddr(s) == "127.0.0.1:1001"
	})
	cen.set(t, bigWorld(5<<20, 1002))
	wait(t, proxy, "an endpoint change after it", 15*time.Second, func(s adsclient.State) bool { return endpointAddr(s) == "127.0.0.1:1002" })
	if body := readyz(t, ag); !strings.Contains(body, `"status":"ready"`) {
		t.Errorf("/readyz: %s", body)
	}
	if n := metricValue(t, ag, "consul_xds_bridge_agent_upstream_reconnects_total"); n != 0 {
		t.Errorf("the agent reconnected %v times", n)
	}
	// The blast radius: a few copies of 5 MB, not a leak per attempt.
	if rss := rssBytes(); rss > 1<<30 {
		t.Errorf("test process RSS %d MiB", rss>>20)
	}
}

// TestAgentBacksOffWhenItCannotSync (issue 36, 6): when responses exceed
// what the agent accepts (max_message_size set below the listener here),
// the relay backs off instead of reconnecting hundreds of times a second,
// and /readyz and /v1/proxies say it cannot sync and what to change.
func TestAgentBacksOffWhenItCannotSync(t *testing.T) {
	cen := startStandIn(t, nil, bigWorld(2<<20, 1001))
	ag := startAgentWith(t, t.TempDir(), func(c *agent.Config) {
		c.Upstreams = []string{cen.addr}
		c.MaxMessageSize = 1 << 20
	})
	proxy := dial(t, "unix://"+ag.SocketAddr().String(), "edge-big", adsclient.Delta)
	_ = proxy
	time.Sleep(3 * time.Second)
	// 50 ms doubling to 500 ms, jittered: about 8 attempts in 3 s.
	if n := metricValue(t, ag, "consul_xds_bridge_agent_upstream_reconnects_total"); n < 1 || n > 15 {
		t.Errorf("%v reconnects in 3 s, want a few (backing off)", n)
	}
	resp, err := http.Get("http://" + ag.AdminAddr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var rz struct {
		Status string `json:"status"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&rz)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(rz.Status, "edge-big cannot sync") || !strings.Contains(rz.Status, "max_message_size") {
		t.Errorf("/readyz %d %q, want 503 naming the group and max_message_size", resp.StatusCode, rz.Status)
	}
	resp, err = http.Get("http://" + ag.AdminAddr().String() + "/v1/proxies")
	if err != nil {
		t.Fatal(err)
	}
	var proxies []struct {
		NodeCluster string `json:"node_cluster"`
		Relay       *struct {
			SyncError string `json:"sync_error"`
		} `json:"relay"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&proxies)
	resp.Body.Close()
	if len(proxies) != 1 || proxies[0].Relay == nil || !strings.Contains(proxies[0].Relay.SyncError, "ResourceExhausted") {
		t.Errorf("/v1/proxies: %+v, want edge-big's relay sync error", proxies)
	}
}

// TestAgentDropsRelayedLeaves: a secret the central bridge sends under a
// Connect leaf's name never reaches a local proxy (leaves come from the
// local Consul agent, to the proxy acting for the service only); other
// secrets pass.
func TestAgentDropsRelayedLeaves(t *testing.T) {
	world := func(group string) *xds.Resources {
		r := bigWorld(10, 1001)(group)
		tlsCert := func(name string) *tlsv3.Secret {
			return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
				CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "chain"}},
				PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "key"}}}}}
		}
		ca := &tlsv3.Secret{Name: "edge-ca", Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "ca"}}}}}
		r.Secrets = []*tlsv3.Secret{tlsCert(agent.LeafSecretPrefix + "api"), ca}
		// The relay subscribes to the secrets clusters name, as Envoy does.
		ads := &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}
		tc, err := anypb.New(&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: agent.LeafSecretPrefix + "api", SdsConfig: ads}},
			ValidationContextType:          &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "edge-ca", SdsConfig: ads}},
		}})
		if err != nil {
			panic(err)
		}
		r.Clusters[0].TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tc}}
		return r
	}
	cen := startStandIn(t, nil, world)
	ag := startAgent(t, t.TempDir(), cen.addr)
	ans := askSecrets("unix://"+ag.SocketAddr().String(), "p", "edge-x", []string{agent.LeafSecretPrefix + "api", "edge-ca"}, 3*time.Second)
	if strings.Join(ans.Got, ",") != "edge-ca" {
		t.Fatalf("got %+v, want edge-ca only", ans)
	}
}
