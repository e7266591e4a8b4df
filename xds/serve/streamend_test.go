package serve

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// adsPair opens a SotW and a delta ADS stream for node.cluster edge and
// reads and ACKs their first answers.
type adsPair struct {
	sotw  discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	delta discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
}

func openPair(t *testing.T, ctx context.Context, addr, id string) adsPair {
	t.Helper()
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(grpcConn(t, addr))
	node := &corev3.Node{Id: id, Cluster: "edge"}
	sotw, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sotw.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	r, err := sotw.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := sotw.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	delta, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := delta.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	dr, err := delta.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := delta.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: dr.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	return adsPair{sotw: sotw, delta: delta}
}

// TestShutdownEndsStreamsWithOK: when the server stops, every xDS stream
// ends at once with OK, as go-control-plane's servers end them, though
// its handler is blocked reading a client that says nothing more; the
// shutdown does not wait out its grace period.
func TestShutdownEndsStreamsWithOK(t *testing.T) {
	s := NewServer(ServerConfig{ShutdownGrace: 20 * time.Second, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if _, err := s.Update(context.Background(), testOutput(t, []string{"api"}, 8080), resolveEdge); err != nil {
		t.Fatal(err)
	}
	addr, stop := serveForShutdown(t, s)
	p := openPair(t, waitCtx(t), addr, "quiet")
	if d := stop(); d > 5*time.Second {
		t.Fatalf("shutdown took %v, want well under the 20s grace", d)
	}
	if _, err := p.sotw.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("SotW stream ended with %v, want OK (io.EOF)", err)
	}
	if _, err := p.delta.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("delta stream ended with %v, want OK (io.EOF)", err)
	}
}

// serveForShutdown serves s on a loopback port until stop, which ends
// Serve's context and returns how long Serve took to return (failing the
// test if it erred, or took 30 s).
func serveForShutdown(t *testing.T, s *Server) (addr string, stop func() time.Duration) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	return lis.Addr().String(), func() time.Duration {
		t.Helper()
		start := time.Now()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Serve did not return")
		}
		return time.Since(start)
	}
}

// TestIdleStreamHoldsOneGoroutine: an idle xDS stream holds one
// goroutine of the servers' (its handler, reading); the goroutine that
// sends exists only while answers wait, and is back to none after an
// update reached every stream.
func TestIdleStreamHoldsOneGoroutine(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	// The streams outlive the checks' own deadline, so a count that is
	// never right times out while every stream is still open.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const pairs = 10
	var all []adsPair
	for i := range pairs {
		all = append(all, openPair(t, ctx, s.addr, "p"+strconv.Itoa(i)))
	}
	want := 2 * pairs
	check := func(when string) {
		t.Helper()
		var got int
		eventually(t, when+": one goroutine per stream", func() bool {
			got = streamGoroutines()
			return got == want
		}, func() string { return "goroutines in the servers' stream code: " + strconv.Itoa(got) })
	}
	check("idle")
	// An update reaches every stream (its sender comes and goes).
	s.update(t, testOutput(t, []string{"api", "web"}, 8080))
	for _, p := range all {
		if _, err := p.sotw.Recv(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.delta.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	check("after an update")
}

// streamGoroutines counts the goroutines running the servers' stream
// code (runStream and the outbox's sender).
func streamGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "/xds/serve.runStream") || strings.Contains(g, "/xds/serve.(*outbox") {
			count++
		}
	}
	return count
}

// TestSendFailureEndsTheStreamWithItsStatus: a send that fails (gRPC has
// then ended the stream with the send's status and woken the read) ends
// the stream with that status, not the read's.
func TestSendFailureEndsTheStreamWithItsStatus(t *testing.T) {
	tooLarge := status.Error(codes.ResourceExhausted, "message larger than max")
	a := newADSStream[int](1)
	str, end := context.WithCancel(context.Background())
	defer end()
	first := true
	err := runStream(a, newStreamEnder(context.Background()), str,
		func(context.Context) error { return nil }, func(*corev3.Node) {},
		func() (int, error) {
			if first {
				first = false
				return 1, nil
			}
			<-str.Done() // as gRPC's read, woken when the send ended the stream
			return 0, status.Error(codes.Canceled, "context canceled")
		},
		func(n int) error { a.out.push(n); return nil },
		func(int, int64) error { end(); return tooLarge }, nil)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stream ended with %v, want the send's %v", err, tooLarge)
	}
}

// TestNoSendAfterStop: once a stream stops sending, an answer the cache
// queues later (it may, until the stream's watches are cancelled) starts
// no sender: gRPC forbids a send after the handler returned.
func TestNoSendAfterStop(t *testing.T) {
	o := newOutbox[int]()
	var sends atomic.Int64
	o.start(context.Background(), func(int, int64) error { sends.Add(1); return nil }, nil)
	if err := o.stop(); err != nil {
		t.Fatal(err)
	}
	o.push(1)
	time.Sleep(50 * time.Millisecond)
	if n := sends.Load(); n != 0 {
		t.Fatalf("%d sends after stop", n)
	}
}

// TestStreamWaitsForItsSender: a stream whose read ended does not return
// while its sender is still in a send (its handler's return would let
// gRPC finish the stream under it).
func TestStreamWaitsForItsSender(t *testing.T) {
	a := newADSStream[int](1)
	sending, release := make(chan struct{}), make(chan struct{})
	reads := 0
	done := make(chan error, 1)
	go func() {
		done <- runStream(a, newStreamEnder(context.Background()), context.Background(),
			func(context.Context) error { return nil }, func(*corev3.Node) {},
			func() (int, error) {
				reads++
				if reads == 1 {
					return 1, nil
				}
				<-sending
				return 0, io.EOF
			},
			func(n int) error { a.out.push(n); return nil },
			func(int, int64) error { close(sending); <-release; return nil }, nil)
	}()
	select {
	case err := <-done:
		t.Fatalf("the stream returned (%v) while its sender was in a send", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stream ended with %v, want nil (the client ended it)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end once its send returned")
	}
}

// rawStream serves one bidirectional gRPC method whose handler is serve,
// and opens a stream to it.
func rawStream(t *testing.T, ctx context.Context, serve func(grpc.ServerStream) error) grpc.ClientStream {
	t.Helper()
	g := grpc.NewServer()
	desc := &grpc.StreamDesc{StreamName: "S", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, ss grpc.ServerStream) error { return serve(ss) }}
	g.RegisterService(&grpc.ServiceDesc{ServiceName: "test.Raw", HandlerType: (*any)(nil), Streams: []grpc.StreamDesc{*desc}}, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	cs, err := grpcConn(t, lis.Addr().String()).NewStream(ctx, desc, "/test.Raw/S")
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// runRaw runs runStream on a real gRPC stream: each request read is
// handled by handle, and each answer queued goes out through send.
func runRaw(a *adsStream[int], handle func(*discoveryv3.DiscoveryRequest) error, send func(grpc.ServerStream, int64) error) func(grpc.ServerStream) error {
	return func(ss grpc.ServerStream) error {
		return runStream(a, newStreamEnder(context.Background()), ss.Context(),
			func(context.Context) error { return nil }, func(*corev3.Node) {},
			func() (*discoveryv3.DiscoveryRequest, error) {
				req := &discoveryv3.DiscoveryRequest{}
				return req, ss.RecvMsg(req)
			},
			handle, func(_ int, nonce int64) error { return send(ss, nonce) }, nil)
	}
}

// TestOwnSendFailureEndsTheStream: a send that fails before gRPC saw it
// (a response the bridge could not make) ends the stream with its
// status, rather than leaving a stream that reads on and never sends.
func TestOwnSendFailureEndsTheStream(t *testing.T) {
	ctx := waitCtx(t)
	a := newADSStream[int](1)
	cs := rawStream(t, ctx, runRaw(a,
		func(*discoveryv3.DiscoveryRequest) error { a.out.push(1); return nil },
		func(grpc.ServerStream, int64) error { return status.Error(codes.Internal, "no response could be made") }))
	if err := cs.SendMsg(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	err := cs.RecvMsg(&discoveryv3.DiscoveryResponse{})
	if status.Code(err) != codes.Internal {
		t.Fatalf("stream ended with %v, want the send's Internal", err)
	}
}

// TestRefusedRequestEndsAStreamWhoseSendIsBlocked: a request that ends
// the stream (refused) does so at once, with its status, even while the
// stream's sender is blocked on a client that does not read.
func TestRefusedRequestEndsAStreamWhoseSendIsBlocked(t *testing.T) {
	ctx := waitCtx(t)
	a := newADSStream[int](1)
	requests := 0
	inSend := make(chan struct{})
	cs := rawStream(t, ctx, runRaw(a,
		func(*discoveryv3.DiscoveryRequest) error {
			if requests++; requests == 1 {
				a.out.push(1)
				return nil
			}
			<-inSend
			return status.Error(codes.PermissionDenied, "refused")
		},
		func(ss grpc.ServerStream, _ int64) error {
			close(inSend)
			<-ss.Context().Done() // as gRPC's send, blocked by flow control
			return ss.Context().Err()
		}))
	for range 2 {
		if err := cs.SendMsg(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType}); err != nil {
			t.Fatal(err)
		}
	}
	err := cs.RecvMsg(&discoveryv3.DiscoveryResponse{})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("stream ended with %v, want the refusal's PermissionDenied", err)
	}
}

// TestStreamOpenedAfterShutdownEndsAtOnce: a stream whose handler starts
// after its server's end (the one hook for all streams has run) is ended
// with OK at once, not left reading.
func TestStreamOpenedAfterShutdownEndsAtOnce(t *testing.T) {
	ctx := waitCtx(t)
	server, stop := context.WithCancel(context.Background())
	ender := newStreamEnder(server)
	stop()
	a := newADSStream[int](1)
	cs := rawStream(t, ctx, func(ss grpc.ServerStream) error {
		return runStream(a, ender, ss.Context(),
			func(context.Context) error { return nil }, func(*corev3.Node) {},
			func() (*discoveryv3.DiscoveryRequest, error) {
				req := &discoveryv3.DiscoveryRequest{}
				return req, ss.RecvMsg(req)
			},
			func(*discoveryv3.DiscoveryRequest) error { return nil }, func(int, int64) error { return nil }, nil)
	})
	if err := cs.RecvMsg(&discoveryv3.DiscoveryResponse{}); !errors.Is(err, io.EOF) {
		t.Errorf("stream ended with %v, want OK (io.EOF)", err)
	}
	ender.mu.Lock()
	defer ender.mu.Unlock()
	if len(ender.ctxs) != 0 {
		t.Errorf("an ended server holds %d streams", len(ender.ctxs))
	}
}
