package serve

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestAdmissionBoundsInitialSyncs: with one initial-sync slot, a second
// proxy is not answered while the first has not acknowledged its state,
// and is as soon as the first finishes (ACKs its clusters and their
// endpoints, never asking for listeners) or goes away.
func TestAdmissionBoundsInitialSyncs(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := startServer(t, ServerConfig{MaxInitialSyncs: 1, Registerer: reg})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	gauge := func(name string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}

	// A raw stream takes the slot: it asks for clusters and never ACKs.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(grpcConn(t, s.addr)).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "holder", Cluster: "edge"}
	if err := ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	first, err := ads.Recv()
	if err != nil {
		t.Fatal(err)
	}

	waiter := dial(t, s, adsclient.Config{NodeID: "waiter", Cluster: "edge", Mode: adsclient.SotW})
	eventually(t, "the second stream to wait", func() bool { return gauge("consul_xds_bridge_initial_syncs_waiting") == 1 },
		func() string { return "waiting gauge not 1" })
	time.Sleep(200 * time.Millisecond)
	if n := len(waiter.Responses()); n != 0 {
		t.Fatalf("waiting proxy got %d responses while the slot was held", n)
	}
	if got := testutil.ToFloat64(s.metrics.admissionSyncing); got != 1 {
		t.Errorf("syncing = %v, want 1", got)
	}

	// The holder acknowledges its clusters but has not asked for their
	// endpoints yet: it still holds the slot.
	ack := func(typeURL string, resp *discoveryv3.DiscoveryResponse) {
		t.Helper()
		if err := ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeURL, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	ack(resourcev3.ClusterType, first)
	time.Sleep(200 * time.Millisecond)
	if n := len(waiter.Responses()); n != 0 {
		t.Fatalf("waiting proxy got %d responses while the holder had clusters without endpoints", n)
	}
	// The holder finishes as an Envoy with static listeners does: it gets
	// and ACKs the endpoints of its clusters and never asks for listeners.
	if err := ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"api"}}); err != nil {
		t.Fatal(err)
	}
	eds, err := ads.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if eds.GetTypeUrl() != resourcev3.EndpointType {
		t.Fatalf("got %s, want endpoints", eds.GetTypeUrl())
	}
	ack(resourcev3.EndpointType, eds)

	// Well before the 20 s hold that frees a stuck stream's slot.
	ctx5, cancel5 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel5()
	if _, err := waiter.Wait(ctx5, func(st adsclient.State) bool { return len(st.ListenerNames()) == 1 }); err != nil {
		t.Fatalf("waiting proxy not synced within 5s of the holder's endpoints ACK: %v", err)
	}

	// A third proxy waits behind the second until the second is done; a
	// stream that closes while waiting frees nothing it never held.
	if got := gauge("consul_xds_bridge_initial_syncs_waiting"); got != 0 {
		t.Errorf("waiting = %v after both synced, want 0", got)
	}
	cancel()
	third := dial(t, s, adsclient.Config{NodeID: "third", Cluster: "edge", Mode: adsclient.Delta})
	if _, err := third.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.ListenerNames()) == 1 }); err != nil {
		t.Fatalf("third proxy never synced: %v", err)
	}
}

// TestUnknownTypesCannotStallTheCache: a client asking for type URLs the
// bridge does not serve gets no answers for them, and beyond
// maxTypesPerStream its stream is ended with InvalidArgument; the watches
// it filed never exceed that bound, and other proxies are served as usual.
// (Answering them once queued more responses than the stream's channel
// holds, while the cache held its lock; keeping them, 300 type URLs of
// 1 MB held 300 MB.)
func TestUnknownTypesCannotStallTheCache(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(grpcConn(t, s.addr)).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "greedy", Cluster: "edge"}
	for i := range 3000 {
		if err := ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: fmt.Sprintf("type.googleapis.com/made.up.Type%d", i)}); err != nil {
			break // the server ended the stream
		}
	}
	if _, err := ads.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "type URLs on one stream") {
		t.Fatalf("stream with 3000 made-up type URLs ended with %v, want InvalidArgument", err)
	}
	if n := s.cache.Waiting("edge"); n > maxTypesPerStream {
		t.Errorf("%d watches kept for it, want at most %d", n, maxTypesPerStream)
	}
	other := dial(t, s, adsclient.Config{NodeID: "other", Cluster: "edge", Mode: adsclient.SotW})
	if _, err := other.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.ListenerNames()) == 1 }); err != nil {
		t.Fatalf("another proxy was not served after one asked for unknown types: %v", err)
	}
	if got := s.Served("edge", "type.googleapis.com/made.up.Type0"); got != nil {
		t.Errorf("Served(unknown type) = %v, want nil", got)
	}
}

// TestHostileRequestsAreRefused: a node too large to keep, a type URL
// too long, and a node that changes within a stream each end the stream
// with InvalidArgument, counted; a NACK's error text is cut in
// /v1/proxies with its full length kept. A proxy connected throughout
// still gets a health flip.
func TestHostileRequestsAreRefused(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	good := dial(t, s, adsclient.Config{NodeID: "good", Cluster: "edge", Mode: adsclient.Delta})
	if _, err := good.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.ClusterNames()) == 1 }); err != nil {
		t.Fatal(err)
	}
	big, _ := structpb.NewStruct(map[string]any{"junk": strings.Repeat("x", 200<<10)})
	for name, reqs := range map[string][]*discoveryv3.DiscoveryRequest{
		"big node":           {{Node: &corev3.Node{Id: "big", Cluster: "edge", Metadata: big}, TypeUrl: resourcev3.ClusterType}},
		"long type URL":      {{Node: &corev3.Node{Id: "long", Cluster: "edge"}, TypeUrl: "type.googleapis.com/" + strings.Repeat("x", 1<<20)}},
		"long resource name": {{Node: &corev3.Node{Id: "named", Cluster: "edge"}, TypeUrl: resourcev3.ClusterType, ResourceNames: []string{strings.Repeat("n", 8<<10)}}},
		"node changes": {
			{Node: &corev3.Node{Id: "shifty", Cluster: "edge"}, TypeUrl: resourcev3.ClusterType},
			{Node: &corev3.Node{Id: "shifty", Cluster: strings.Repeat("y", 1000)}, TypeUrl: resourcev3.ListenerType},
		},
	} {
		t.Run(name, func(t *testing.T) {
			ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(grpcConn(t, s.addr)).StreamAggregatedResources(waitCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range reqs {
				if err := ads.Send(r); err != nil {
					break
				}
			}
			for {
				_, err := ads.Recv()
				if err == nil {
					continue // the CDS answer to a valid first request
				}
				if status.Code(err) != codes.InvalidArgument {
					t.Fatalf("stream ended with %v, want InvalidArgument", err)
				}
				break
			}
		})
	}
	// Delta subscriptions add up over requests: past the stream's bound
	// the stream ends, each request being well under the message limit.
	t.Run("delta names add up", func(t *testing.T) {
		d, err := discoveryv3.NewAggregatedDiscoveryServiceClient(grpcConn(t, s.addr)).DeltaAggregatedResources(waitCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		var sendErr error
		for i := 0; i < 8 && sendErr == nil; i++ {
			names := make([]string, 3<<10)
			for j := range names {
				names[j] = fmt.Sprintf("%d-%d-%s", i, j, strings.Repeat("n", 1000))
			}
			r := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: names}
			if i == 0 {
				r.Node = &corev3.Node{Id: "greedy", Cluster: "edge"}
			}
			sendErr = d.Send(r)
		}
		for {
			if _, err := d.Recv(); err != nil {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "resource names of") {
					t.Fatalf("stream ended with %v, want InvalidArgument naming the names bound", err)
				}
				break
			}
		}
	})
	if got := testutil.ToFloat64(s.metrics.refused); got != 5 {
		t.Errorf("refused requests = %v, want 5", got)
	}
	if keys := len(s.cache.Keys()); keys > 3 {
		t.Errorf("%d snapshot keys after the hostile streams ended, want edge and the shared one", keys)
	}

	// A NACK with a huge error text is cut where it is shown.
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(grpcConn(t, s.addr)).StreamAggregatedResources(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "nacker", Cluster: "edge"}
	if err := ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := ads.Recv()
	if err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("e", 1<<20)
	if err := ads.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: resp.GetNonce(), ErrorDetail: &rpcstatus.Status{Message: huge}}); err != nil {
		t.Fatal(err)
	}
	p := s.waitStatus(t, "nacker", "CDS", StatusNACKed)
	if n := p.Types["CDS"].LastNACK; len(n.Error) > maxNACKText+16 || n.ErrorBytes != len(huge) {
		t.Errorf("last NACK shown with %d bytes (full %d), want it cut at %d with the full length kept", len(n.Error), n.ErrorBytes, maxNACKText)
	}

	// The proxy connected throughout still gets a health flip.
	s.update(t, withEndpointPort(testOutput(t, []string{"api"}, 8080), 0, 9999))
	if _, err := good.Wait(waitCtx(t), func(st adsclient.State) bool {
		eps := st.Endpoints("api")
		return len(eps) == 1 && strings.HasSuffix(eps[0].Address, ":9999")
	}); err != nil {
		t.Fatalf("a proxy connected throughout missed an update: %v", err)
	}
}

// TestKeyForgottenWithItsLastStream: a node.cluster is served while a
// proxy uses it and forgotten when the last one leaves (clients choose the
// string, so keys must not pile up); a proxy announcing it again is served.
func TestKeyForgottenWithItsLastStream(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	known := func(key string) bool { return s.cache.Served(key) != nil }
	synced := func(c *adsclient.Client) {
		t.Helper()
		if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.ClusterNames()) == 1 }); err != nil {
			t.Fatal(err)
		}
	}
	a := dial(t, s, adsclient.Config{NodeID: "a", Cluster: "short-lived", Mode: adsclient.SotW})
	b := dial(t, s, adsclient.Config{NodeID: "b", Cluster: "short-lived", Mode: adsclient.Delta})
	synced(a)
	synced(b)
	if !known("short-lived") {
		t.Fatal("key not served while its proxies are connected")
	}
	_ = a.Close()
	time.Sleep(100 * time.Millisecond)
	if !known("short-lived") {
		t.Fatal("key forgotten while a proxy still uses it")
	}
	_ = b.Close()
	eventually(t, "the key to be forgotten", func() bool { return !known("short-lived") }, func() string { return "still known" })
	if !known("") {
		t.Error("the shared key was forgotten")
	}
	synced(dial(t, s, adsclient.Config{NodeID: "c", Cluster: "short-lived", Mode: adsclient.SotW}))
	if !known("short-lived") {
		t.Error("key not served again for a new proxy")
	}
}

// TestIdleStreamsHoldNoSlot: streams that open and send nothing take no
// initial-sync slot (one used to be taken at open, so 300 idle streams
// delayed a real proxy by a minute): with one slot and ten idle streams,
// a proxy syncs at once.
func TestIdleStreamsHoldNoSlot(t *testing.T) {
	s := startServer(t, ServerConfig{MaxInitialSyncs: 1})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	conn := grpcConn(t, s.addr)
	for range 10 {
		if _, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(waitCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	c := dial(t, s, adsclient.Config{NodeID: "real", Cluster: "edge", Mode: adsclient.SotW})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the hold that frees a stuck slot is 20s
	defer cancel()
	if _, err := c.Wait(ctx, func(st adsclient.State) bool { return len(st.ListenerNames()) == 1 }); err != nil {
		t.Fatalf("a proxy behind ten idle streams did not sync: %v", err)
	}
}

// TestSilentStreamsAreClosed: a stream that sends no request within the
// first-request timeout is ended with DeadlineExceeded and counted, on
// SotW and delta alike; one that does send is served as usual.
func TestSilentStreamsAreClosed(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := startServer(t, ServerConfig{FirstRequestTimeout: 200 * time.Millisecond, Registerer: reg})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	conn := grpcConn(t, s.addr)
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	sotw, err := ads.StreamAggregatedResources(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	delta, err := ads.DeltaAggregatedResources(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	// The client's own deadline would be DeadlineExceeded too: the
	// server's reason tells them apart.
	if _, err := sotw.Recv(); status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no xDS request within") {
		t.Fatalf("silent SotW stream ended with %v, want DeadlineExceeded saying why", err)
	}
	if _, err := delta.Recv(); status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no xDS request within") {
		t.Fatalf("silent delta stream ended with %v, want DeadlineExceeded saying why", err)
	}
	if got := testutil.ToFloat64(s.metrics.idleClosed); got != 2 {
		t.Errorf("consul_xds_bridge_idle_streams_closed_total = %v, want 2", got)
	}
	// A proxy that talks is unaffected, past the timeout too.
	c := dial(t, s, adsclient.Config{NodeID: "real", Cluster: "edge", Mode: adsclient.Delta})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Wait(ctx, func(st adsclient.State) bool { return len(st.ListenerNames()) == 1 }); err != nil {
		t.Fatalf("a proxy that sent its request was not served: %v", err)
	}
	time.Sleep(400 * time.Millisecond)
	s.update(t, testOutput(t, []string{"api", "web"}, 8080))
	if _, err := c.Wait(ctx, func(st adsclient.State) bool { return len(st.ClusterNames()) == 2 }); err != nil {
		t.Fatalf("a talking stream was closed or stopped receiving after the first-request timeout: %v", err)
	}
}

// TestShutdownDoesNotWaitForAdmission: a stream waiting for an
// initial-sync slot does not hold the server's shutdown for its grace
// period (the slot's holder ends and frees it, and the waiting stream's
// callback context ends with the server too).
func TestShutdownDoesNotWaitForAdmission(t *testing.T) {
	s := NewServer(ServerConfig{MaxInitialSyncs: 1, ShutdownGrace: 20 * time.Second, Logger: zerolog.Nop()})
	if _, err := s.Update(context.Background(), testOutput(t, []string{"api"}, 8080), resolveEdge); err != nil {
		t.Fatal(err)
	}
	addr, stop := serveForShutdown(t, s)
	conn := grpcConn(t, addr)
	open := func(id string) discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
		ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(waitCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := ads.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: id, Cluster: "edge"}, TypeUrl: resourcev3.ClusterType}); err != nil {
			t.Fatal(err)
		}
		return ads
	}
	holder := open("holder")
	if _, err := holder.Recv(); err != nil { // the slot is taken, never released by an ACK
		t.Fatal(err)
	}
	open("waiter")
	eventually(t, "the waiter to wait for the slot", func() bool { return testutil.ToFloat64(s.metrics.admissionWaiting) == 1 },
		func() string { return "waiting gauge not 1" })
	if d := stop(); d > 5*time.Second {
		t.Fatalf("shutdown took %v, want well under the 20s grace", d)
	}
}

// TestNodelessStreamsAreRefused: the xDS protocol puts the node in a
// stream's first request; one without it would be served as
// node.cluster "", which a "*" group matches. It is refused with
// InvalidArgument on SotW and delta, without authorize_nodes too (REST
// answers such a poll 400).
func TestNodelessStreamsAreRefused(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(grpcConn(t, s.addr))
	sotw, err := ads.StreamAggregatedResources(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := sotw.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if _, err := sotw.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "must carry its node") {
		t.Errorf("SotW stream without a node: %v, want InvalidArgument", err)
	}
	delta, err := ads.DeltaAggregatedResources(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := delta.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if _, err := delta.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "must carry its node") {
		t.Errorf("delta stream without a node: %v, want InvalidArgument", err)
	}
}
