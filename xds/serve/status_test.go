package serve

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

var modes = []adsclient.Mode{adsclient.SotW, adsclient.Delta}

// A proxy that rejects a version gets it once, then nothing for that type
// until the type changes; other types keep flowing; the next version is
// sent and ACKed. /v1/proxies shows SYNCED, NACKED with the error text,
// then SYNCED again.
func TestNACKIsNotResent(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			testNACKIsNotResent(t, mode)
		})
	}
}

func testNACKIsNotResent(t *testing.T, mode adsclient.Mode) {
	reg := prometheus.NewRegistry()
	s := startServer(t, ServerConfig{Registerer: reg})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	v0 := s.current("", resourcev3.ClusterType) // shared by all keys
	c := dial(t, s, adsclient.Config{NodeID: "envoy-1", Cluster: "edge", Mode: mode, NACK: rejectCluster("bad")})
	ctx := waitCtx(t)

	// SYNCED on every type.
	if _, err := c.Wait(ctx, func(st adsclient.State) bool { return len(st.RouteConfigNames()) == 1 }); err != nil {
		t.Fatal(err)
	}
	p := s.waitStatus(t, "envoy-1", "RDS", StatusSynced)
	eventually(t, "SYNCED", func() bool { p = s.proxy("envoy-1"); return p.Status == StatusSynced }, func() string { return describeProxy(p) })
	if got := p.Types["CDS"].VersionAcked; got != v0 {
		t.Errorf("CDS version_acked = %q, want %q", got, v0)
	}

	// A rejected version: NACKED with the proxy's error text.
	s.update(t, testOutput(t, []string{"api", "bad"}, 8080))
	vBad := s.current("edge", resourcev3.ClusterType)
	p = s.waitStatus(t, "envoy-1", "CDS", StatusNACKed)
	if p.Status != StatusNACKed {
		t.Errorf("proxy status = %s, want NACKED", p.Status)
	}
	cds := p.Types["CDS"]
	if cds.LastNACK == nil || cds.LastNACK.Version != vBad || !strings.Contains(cds.LastNACK.Error, `cluster "bad": rejected by the test`) {
		t.Errorf("last_nack = %+v, want version %q and the proxy's error text", cds.LastNACK, vBad)
	}
	if cds.VersionAcked != v0 || cds.VersionSent != vBad || cds.VersionCurrent != vBad {
		t.Errorf("CDS acked/sent/current = %q/%q/%q, want %q/%q/%q", cds.VersionAcked, cds.VersionSent, cds.VersionCurrent, v0, vBad, vBad)
	}

	// Another type changes: it is pushed, and the rejected CDS version is
	// still not resent.
	s.update(t, testOutput(t, []string{"api", "bad"}, 8081))
	v1LDS := s.current("edge", resourcev3.ListenerType)
	if _, err := c.Wait(ctx, func(st adsclient.State) bool { return st.Version(adsclient.ListenerType) == v1LDS }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a resend loop sends many in this time
	var bad []adsclient.ResponseInfo
	for _, r := range responsesOf(c, adsclient.ClusterType) {
		if r.Version == vBad {
			bad = append(bad, r)
		}
	}
	if len(bad) != 1 || bad[0].NACK == "" {
		t.Fatalf("CDS version %s received %d times (first: %+v), want once, NACKed", vBad, len(bad), bad[:min(len(bad), 2)])
	}
	if n := testutil.ToFloat64(s.metrics.nacks.WithLabelValues("CDS")); n != 1 {
		t.Errorf("nacks_total{type=CDS} = %v, want 1", n)
	}
	if p = s.proxy("envoy-1"); p.Status != StatusNACKed {
		t.Errorf("after an LDS push, status = %s, want still NACKED", p.Status)
	}

	// The next change is sent, ACKed, and the proxy is SYNCED again.
	s.update(t, testOutput(t, []string{"api", "web"}, 8081))
	v2 := s.current("edge", resourcev3.ClusterType)
	if _, err := c.Wait(ctx, func(st adsclient.State) bool { return st.Version(adsclient.ClusterType) == v2 }); err != nil {
		t.Fatal(err)
	}
	p = s.waitStatus(t, "envoy-1", "CDS", StatusSynced)
	eventually(t, "SYNCED", func() bool { p = s.proxy("envoy-1"); return p.Status == StatusSynced }, func() string { return describeProxy(p) })
	cds = p.Types["CDS"]
	if cds.VersionAcked != v2 || cds.LastNACK == nil || cds.LastNACK.Version != vBad {
		t.Errorf("CDS acked = %q, last_nack = %+v; want %q and the old NACK kept", cds.VersionAcked, cds.LastNACK, v2)
	}
	if n := len(responsesOf(c, adsclient.ClusterType)); n != 3 {
		t.Errorf("CDS responses = %d, want 3 (v0, bad once, v2): %+v", n, responsesOf(c, adsclient.ClusterType))
	}
	checkTotals(t, s.Server, reg)
}

// checkTotals: Totals (the console's activity sampler) reads what the
// registry exports, every label's counter summed.
func checkTotals(t *testing.T, s *Server, reg *prometheus.Registry) {
	t.Helper()
	var want Totals
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "consul_xds_bridge_nacks_total":
				want.NACKs += m.GetCounter().GetValue()
			case "consul_xds_bridge_pushes_total":
				want.Pushes += m.GetCounter().GetValue()
			case "consul_xds_bridge_push_fanout_seconds":
				want.Fanouts += float64(m.GetHistogram().GetSampleCount())
				want.FanoutSeconds += m.GetHistogram().GetSampleSum()
			}
		}
	}
	if got := s.Totals(); got != want || want.NACKs == 0 || want.Pushes == 0 || want.Fanouts == 0 {
		t.Errorf("Totals() = %+v, the registry %+v (each must be counted)", got, want)
	}
}

// After a NACK, SotW requests keep the rejected response's nonce and the
// old version_info (Envoy sends one when its subscription changes); they
// must not bring the rejected version back either.
func TestRequestAfterNACKNotAnswered(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(grpcConn(t, s.addr))
	stream, err := ads.StreamAggregatedResources(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	send := func(r *discoveryv3.DiscoveryRequest) {
		t.Helper()
		r.TypeUrl = resourcev3.ClusterType
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	responses := make(chan *discoveryv3.DiscoveryResponse, 16)
	go func() {
		defer close(responses)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			responses <- r
		}
	}()
	recv := func() *discoveryv3.DiscoveryResponse {
		t.Helper()
		select {
		case r := <-responses:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no response")
		}
		return nil
	}
	send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-1", Cluster: "edge"}})
	r1 := recv()
	send(&discoveryv3.DiscoveryRequest{VersionInfo: r1.GetVersionInfo(), ResponseNonce: r1.GetNonce()})

	s.update(t, testOutput(t, []string{"api", "bad"}, 8080))
	r2 := recv()
	send(&discoveryv3.DiscoveryRequest{
		VersionInfo: r1.GetVersionInfo(), ResponseNonce: r2.GetNonce(),
		ErrorDetail: &rpcstatus.Status{Code: 13, Message: "no bad clusters"},
	})
	send(&discoveryv3.DiscoveryRequest{VersionInfo: r1.GetVersionInfo(), ResponseNonce: r2.GetNonce()})
	select {
	case r := <-responses:
		t.Fatalf("after a NACK of %s: got version %s again", r2.GetVersionInfo(), r.GetVersionInfo())
	case <-time.After(300 * time.Millisecond):
	}
	p := s.waitStatus(t, "envoy-1", "CDS", StatusNACKed)
	if n := p.Types["CDS"].LastNACK; n == nil || n.Error != "no bad clusters" || n.Version != r2.GetVersionInfo() || n.Nonce != r2.GetNonce() {
		t.Errorf("last_nack = %+v", n)
	}

	s.update(t, testOutput(t, []string{"api", "web"}, 8080))
	r3 := recv()
	if r3.GetVersionInfo() == r2.GetVersionInfo() {
		t.Fatalf("got the rejected version again")
	}
	send(&discoveryv3.DiscoveryRequest{VersionInfo: r3.GetVersionInfo(), ResponseNonce: r3.GetNonce()})
	s.waitStatus(t, "envoy-1", "CDS", StatusSynced)
}

// A SotW request carrying an older nonce, even with error_detail, changes
// nothing.
func TestStaleNonceIgnored(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(grpcConn(t, s.addr))
	stream, err := ads.StreamAggregatedResources(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{
		Id: "grpc-1", Cluster: "edge", UserAgentName: "grpc-go",
		UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: "1.66.0"},
	}
	send := func(r *discoveryv3.DiscoveryRequest) {
		t.Helper()
		r.TypeUrl = resourcev3.ClusterType
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	send(&discoveryv3.DiscoveryRequest{Node: node})
	r1, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	send(&discoveryv3.DiscoveryRequest{VersionInfo: r1.GetVersionInfo(), ResponseNonce: r1.GetNonce()})
	s.waitStatus(t, "grpc-1", "CDS", StatusSynced)

	s.update(t, testOutput(t, []string{"api", "web"}, 8080))
	r2, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	// A late NACK of the first response, then the ACK of the second.
	send(&discoveryv3.DiscoveryRequest{
		VersionInfo: r1.GetVersionInfo(), ResponseNonce: r1.GetNonce(),
		ErrorDetail: &rpcstatus.Status{Code: 13, Message: "late"},
	})
	send(&discoveryv3.DiscoveryRequest{VersionInfo: r2.GetVersionInfo(), ResponseNonce: r2.GetNonce()})
	var p *ProxyStatus
	eventually(t, "ACK of the second response", func() bool {
		p = s.proxy("grpc-1")
		return p.Types["CDS"].VersionAcked == r2.GetVersionInfo()
	}, func() string { return describeProxy(p) })
	if p.Status != StatusSynced || p.Types["CDS"].LastNACK != nil {
		t.Errorf("status %s, last_nack %+v; want SYNCED and no NACK", p.Status, p.Types["CDS"].LastNACK)
	}
	if n := testutil.ToFloat64(s.metrics.nacks.WithLabelValues("CDS")); n != 0 {
		t.Errorf("nacks_total{type=CDS} = %v, want 0", n)
	}
	if n := testutil.ToFloat64(s.metrics.acks.WithLabelValues("CDS")); n != 2 {
		t.Errorf("acks_total{type=CDS} = %v, want 2", n)
	}
	if p.UserAgent != "grpc-go/1.66.0" || p.Kind != "ADS" || p.Group != proxylessGroup || p.NodeCluster != "edge" ||
		!strings.HasPrefix(p.RemoteAddress, "127.0.0.1:") || p.ConnectedSince.IsZero() || p.Stream != "sotw-1" {
		t.Errorf("proxy identity = %+v", p)
	}
}

// A response not ACKed within StaleAfter makes the proxy STALE until the
// ACK comes.
func TestStale(t *testing.T) {
	s := startServer(t, ServerConfig{StaleAfter: 100 * time.Millisecond})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	var (
		hold    = make(chan struct{})
		once    sync.Once
		release = func() { once.Do(func() { close(hold) }) }
		mu      sync.Mutex
		holdV   string
	)
	c := dial(t, s, adsclient.Config{NodeID: "envoy-1", Cluster: "edge", NACK: func(typeURL, version string, _ []*anypb.Any) error {
		mu.Lock()
		v := holdV
		mu.Unlock()
		if typeURL == resourcev3.ClusterType && version == v {
			<-hold // the ACK waits
		}
		return nil
	}})
	t.Cleanup(release) // before Close, which waits for the stream goroutine
	if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.RouteConfigNames()) == 1 }); err != nil {
		t.Fatal(err)
	}
	s.waitStatus(t, "envoy-1", "RDS", StatusSynced)

	next := testOutput(t, []string{"api", "web"}, 8080)
	mu.Lock()
	holdV = versionOf(t, next.Shared, resourcev3.ClusterType)
	mu.Unlock()
	s.update(t, next)
	p := s.waitStatus(t, "envoy-1", "CDS", StatusStale)
	if p.Status != StatusStale {
		t.Errorf("proxy status = %s, want STALE", p.Status)
	}
	release()
	p = s.waitStatus(t, "envoy-1", "CDS", StatusSynced)
	if p.Types["CDS"].VersionAcked != holdV {
		t.Errorf("CDS version_acked = %q, want %q", p.Types["CDS"].VersionAcked, holdV)
	}
}

func versionOf(t *testing.T, r *xds.Resources, typeURL string) string {
	t.Helper()
	v, err := contentVersion(typeURL, r.ByType()[typeURL])
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Per-type streams (CDS, SotW and delta) are told apart from ADS; on a
// per-type delta stream the type URL may be left out of requests.
func TestPerTypeStreamKinds(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	cds := clusterservice.NewClusterDiscoveryServiceClient(grpcConn(t, s.addr))
	ctx := waitCtx(t)

	sotw, err := cds.StreamClusters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sotw.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "cds-sotw", Cluster: "edge"}}); err != nil {
		t.Fatal(err)
	}
	r, err := sotw.Recv()
	if err != nil {
		t.Fatal(err)
	}
	p := s.waitStatus(t, "cds-sotw", "CDS", StatusPending)
	if p.Kind != "CDS" || p.Types["CDS"].NonceSent != r.GetNonce() {
		t.Errorf("kind %q, CDS %+v; want CDS and nonce %q", p.Kind, p.Types["CDS"], r.GetNonce())
	}
	if err := sotw.Send(&discoveryv3.DiscoveryRequest{VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	s.waitStatus(t, "cds-sotw", "CDS", StatusSynced)

	delta, err := cds.DeltaClusters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := delta.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "cds-delta", Cluster: "edge"}}); err != nil {
		t.Fatal(err)
	}
	dr, err := delta.Recv()
	if err != nil {
		t.Fatal(err)
	}
	p = s.waitStatus(t, "cds-delta", "CDS", StatusPending)
	if p.Kind != "CDS delta" || p.Stream != "delta-1" {
		t.Errorf("kind %q stream %q, want CDS delta, delta-1", p.Kind, p.Stream)
	}
	if err := delta.Send(&discoveryv3.DeltaDiscoveryRequest{ResponseNonce: dr.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	p = s.waitStatus(t, "cds-delta", "CDS", StatusSynced)
	if p.Types["CDS"].VersionAcked != dr.GetSystemVersionInfo() {
		t.Errorf("delta CDS version_acked = %q, want %q", p.Types["CDS"].VersionAcked, dr.GetSystemVersionInfo())
	}

	// ADS streams of both kinds, sorted by node id.
	dial(t, s, adsclient.Config{NodeID: "ads-delta", Cluster: "edge", Mode: adsclient.Delta})
	dial(t, s, adsclient.Config{NodeID: "ads-sotw", Cluster: "edge"})
	s.waitStatus(t, "ads-delta", "CDS", StatusSynced)
	s.waitStatus(t, "ads-sotw", "CDS", StatusSynced)
	var got []string
	for _, p := range s.Proxies() {
		got = append(got, p.NodeID+"="+p.Kind)
	}
	want := "ads-delta=ADS delta ads-sotw=ADS cds-delta=CDS delta cds-sotw=CDS"
	if strings.Join(got, " ") != want {
		t.Errorf("proxies = %q, want %q", strings.Join(got, " "), want)
	}

	// Closed streams are forgotten.
	if err := sotw.CloseSend(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cds-sotw to be forgotten", func() bool { return s.proxy("cds-sotw") == nil }, func() string { return "still listed" })
}

func TestConfigDump(t *testing.T) {
	s := startServer(t, ServerConfig{})
	if _, err := s.ConfigDump("", "edge"); !errors.Is(err, ErrNotReady) {
		t.Errorf("before Update: err = %v, want ErrNotReady", err)
	}
	s.update(t, testOutput(t, []string{"api", "web"}, 8080))
	if _, err := s.ConfigDump("nobody", ""); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("unknown node: err = %v, want ErrUnknownNode", err)
	}
	dial(t, s, adsclient.Config{NodeID: "envoy-1", Cluster: "edge"})
	s.waitStatus(t, "envoy-1", "CDS", StatusSynced)

	byNode, err := s.ConfigDump("envoy-1", "")
	if err != nil {
		t.Fatal(err)
	}
	if byNode.NodeCluster != "edge" || byNode.Group != "edge" || len(byNode.Clusters) != 2 || len(byNode.Endpoints) != 2 ||
		len(byNode.Listeners) != 1 || len(byNode.Routes) != 1 {
		t.Fatalf("dump by node = %+v", byNode)
	}
	if byNode.Versions["CDS"] != s.current("edge", resourcev3.ClusterType) || byNode.Versions["LDS"] != s.current("edge", resourcev3.ListenerType) {
		t.Errorf("versions = %v", byNode.Versions)
	}
	var cluster map[string]any
	if err := json.Unmarshal(byNode.Clusters[0], &cluster); err != nil {
		t.Fatal(err)
	}
	if cluster["name"] != "api" || cluster["connect_timeout"] != "1s" {
		t.Errorf("first cluster = %v, want api with proto field names", cluster)
	}
	b, err := json.Marshal(byNode)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"node_cluster":"edge"`, `"cluster_name":"web"`, `"route_config_name":"edge.http"`, `"@type":"type.googleapis.com/`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("dump JSON lacks %s:\n%s", want, b)
		}
	}

	byCluster, err := s.ConfigDump("", "edge")
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(byCluster)
	if want := strings.Replace(string(b), `"node_id":"envoy-1",`, "", 1); string(b2) != want {
		t.Errorf("dump by cluster differs from dump by node:\n%s\n%s", b2, want)
	}

	// A node.cluster nobody announced gets the shared resources only.
	other, err := s.ConfigDump("", "batch")
	if err != nil {
		t.Fatal(err)
	}
	if other.Group != "" || len(other.Clusters) != 2 || len(other.Listeners) != 0 || len(other.Routes) != 0 {
		t.Errorf("dump for an unknown group = %+v", other)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := startServer(t, ServerConfig{Registerer: reg})
	s.update(t, testOutput(t, []string{"api", "web", "db"}, 8080))
	c := dial(t, s, adsclient.Config{NodeID: "envoy-1", Cluster: "edge"})
	if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.RouteConfigNames()) == 1 }); err != nil {
		t.Fatal(err)
	}
	s.waitStatus(t, "envoy-1", "RDS", StatusSynced)

	for _, typ := range []string{"CDS", "EDS", "LDS", "RDS"} {
		if n := testutil.ToFloat64(s.metrics.pushes.WithLabelValues(typ)); n != 1 {
			t.Errorf("pushes_total{type=%s} = %v, want 1", typ, n)
		}
		if n := testutil.ToFloat64(s.metrics.acks.WithLabelValues(typ)); n != 1 {
			t.Errorf("acks_total{type=%s} = %v, want 1", typ, n)
		}
	}
	for typ, want := range map[string]float64{"CDS": 3, "EDS": 3, "LDS": 1, "RDS": 1, "SDS": 0} {
		if n := testutil.ToFloat64(s.metrics.resources.WithLabelValues(typ)); n != want {
			t.Errorf("snapshot_resources{type=%s} = %v, want %v", typ, n, want)
		}
	}
	if n := testutil.ToFloat64(s.metrics.connected.WithLabelValues("edge", "ADS")); n != 1 {
		t.Errorf("connected_proxies{group=edge,kind=ADS} = %v, want 1", n)
	}
	for name, want := range map[string]int{
		"consul_xds_bridge_connected_proxies":       1,
		"consul_xds_bridge_pushes_total":            5, // CDS, EDS, LDS, RDS, SDS
		"consul_xds_bridge_acks_total":              5, // SDS included from zero
		"consul_xds_bridge_nacks_total":             5,
		"consul_xds_bridge_snapshot_resources":      5,
		"consul_xds_bridge_snapshot_update_seconds": 1,
	} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != want {
			t.Errorf("%s: %d series (%v), want %d", name, n, err, want)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP consul_xds_bridge_connected_proxies xDS streams open, by proxy group (node.cluster) and stream kind (ADS, ADS delta, CDS, ...). Counted from a stream's first request.
# TYPE consul_xds_bridge_connected_proxies gauge
consul_xds_bridge_connected_proxies{group="edge",kind="ADS"} 1
`), "consul_xds_bridge_connected_proxies"); err != nil {
		t.Error(err)
	}

	// The series of a group goes away with its last stream, so made-up
	// node.cluster values do not accumulate.
	_ = c.Close()
	eventually(t, "the series to go", func() bool {
		n, _ := testutil.GatherAndCount(reg, "consul_xds_bridge_connected_proxies")
		return n == 0
	}, func() string { return "still there" })

	// A second Server on the same registry shares the collectors.
	s2 := NewServer(ServerConfig{Registerer: reg})
	if s2.metrics.pushes != s.metrics.pushes {
		t.Error("second Server did not reuse the registered collectors")
	}
}

func TestHealth(t *testing.T) {
	srvCtx, stop := context.WithCancel(context.Background())
	defer stop()
	s := NewServer(ServerConfig{ShutdownGrace: 10 * time.Second})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(srvCtx, lis) }()
	health := healthpb.NewHealthClient(grpcConn(t, lis.Addr().String()))
	ctx := waitCtx(t)

	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		r, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	for _, svc := range []string{"", "envoy.service.discovery.v3.AggregatedDiscoveryService"} {
		if st := check(svc); st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("before Update, %q: %v, want NOT_SERVING", svc, st)
		}
	}
	if _, err := s.Update(ctx, testOutput(t, []string{"api"}, 8080), resolveEdge); err != nil {
		t.Fatal(err)
	}
	for _, svc := range []string{"", "envoy.service.discovery.v3.AggregatedDiscoveryService"} {
		if st := check(svc); st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("after Update, %q: %v, want SERVING", svc, st)
		}
	}

	watch, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v, want SERVING", r, err)
	}
	// Graceful shutdown: the open watch sees NOT_SERVING, then ends, so
	// it does not hold the drain for the grace period.
	stopped := time.Now()
	stop()
	if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch during shutdown: %v %v, want NOT_SERVING", r, err)
	}
	if r, err := watch.Recv(); err == nil {
		t.Fatalf("watch after NOT_SERVING: %v, want the stream to end", r)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(stopped); d > 5*time.Second {
		t.Errorf("Serve took %v to stop, want well under the 10s grace", d)
	}
}

// TestConfigDumpOfProxylessNode: a gRPC client's dump shows what it gets
// (the proxyless resources), not an Envoy's listeners of the same
// node.cluster.
func TestConfigDumpOfProxylessNode(t *testing.T) {
	s := startServer(t, ServerConfig{})
	out := testOutput(t, []string{"api"}, 8080)
	out.Proxyless = &xds.Resources{}
	s.update(t, out)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: s.addr, NodeID: "grpc-1", Cluster: "edge", UserAgent: "gRPC Go", InitialFetchTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Wait(ctx, func(st adsclient.State) bool { return len(st.ClusterNames()) > 0 }); err != nil {
		t.Fatal(err)
	}
	d, err := s.ConfigDump("grpc-1", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Listeners) != 0 || d.Group != "(proxyless gRPC)" || d.NodeCluster != "edge" || len(d.Clusters) != 1 {
		t.Fatalf("dump of a gRPC node: group %q, node cluster %q, %d listeners, %d clusters", d.Group, d.NodeCluster, len(d.Listeners), len(d.Clusters))
	}
	p := s.proxy("grpc-1")
	if p == nil || p.Group != proxylessGroup || p.Types["CDS"].VersionCurrent == "" || p.Types["CDS"].VersionCurrent != p.Types["CDS"].VersionSent {
		t.Fatalf("/v1/proxies entry of a gRPC node: %+v", p)
	}
	if envoy, _ := s.ConfigDump("", "edge"); len(envoy.Listeners) != 1 {
		t.Fatalf("an Envoy of node.cluster edge should get edge.http: %d listeners", len(envoy.Listeners))
	}
}

// TestProxyCount: ProxyCount (the console's activity sampler, every 2 s)
// counts what Proxies lists, as streams come and go, without building
// their statuses.
func TestProxyCount(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	if n := s.ProxyCount(); n != 0 {
		t.Fatalf("ProxyCount %d with no stream", n)
	}
	a := dial(t, s, adsclient.Config{NodeID: "envoy-1", Cluster: "edge"})
	dial(t, s, adsclient.Config{NodeID: "envoy-2", Cluster: "edge", Mode: adsclient.Delta})
	s.waitStatus(t, "envoy-1", "CDS", StatusSynced)
	s.waitStatus(t, "envoy-2", "CDS", StatusSynced)
	if n, ps := s.ProxyCount(), s.Proxies(); n != 2 || len(ps) != 2 {
		t.Fatalf("ProxyCount %d, Proxies %d; want 2 and 2", n, len(ps))
	}
	a.Close()
	deadline := time.Now().Add(5 * time.Second)
	for s.ProxyCount() != 1 || len(s.Proxies()) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("after one stream closed: ProxyCount %d, Proxies %d; want 1 and 1", s.ProxyCount(), len(s.Proxies()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
