package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// adsHandler is a delta ADS server whose stream runs serve.
type adsHandler struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	serve func(discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error
}

func (h adsHandler) DeltaAggregatedResources(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return h.serve(s)
}

// startADS serves h on a loopback port with grpc-go's server, the one the
// bridge and the baseline run, which enforces HTTP/2 flow control and
// keepalive.
func startADS(t *testing.T, h adsHandler, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, h)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func dialTestH2(t *testing.T, addr string) (*h2Stream, *int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	size := new(int)
	s, err := dialH2(ctx, addr, adsMethods[Delta], func(n int) { *size = n })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, size
}

// TestH2StreamExchangesMessages: a request reaches grpc-go's server
// intact, a response larger than one HTTP/2 frame (16 KiB) comes back
// whole with its size reported, and the server's status ends the stream
// with its code and (percent-decoded) message; OK ends it with io.EOF.
func TestH2StreamExchangesMessages(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	end := status.Error(codes.PermissionDenied, "node web-1: 100% refused")
	addr := startADS(t, adsHandler{serve: func(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
		req, err := s.Recv()
		if err != nil {
			return err
		}
		if err := s.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: req.GetTypeUrl(), Nonce: "n1",
			Resources: []*discoveryv3.Resource{{Name: "a", Resource: &anypb.Any{TypeUrl: "t", Value: []byte(big)}}}}); err != nil {
			return err
		}
		ack, err := s.Recv()
		if err != nil {
			return err
		}
		if ack.GetResponseNonce() != "n1" {
			return status.Errorf(codes.InvalidArgument, "ACK of nonce %q", ack.GetResponseNonce())
		}
		if ack.GetTypeUrl() == "ok" {
			return nil
		}
		return end
	}})
	for _, tc := range []struct {
		ackType string
		want    error
	}{{"t", end}, {"ok", io.EOF}} {
		s, size := dialTestH2(t, addr)
		if err := s.SendMsg(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: "type.googleapis.com/x"}); err != nil {
			t.Fatal(err)
		}
		var resp discoveryv3.DeltaDiscoveryResponse
		if err := s.RecvMsg(&resp); err != nil {
			t.Fatal(err)
		}
		if got := string(resp.GetResources()[0].GetResource().GetValue()); got != big || resp.GetTypeUrl() != "type.googleapis.com/x" {
			t.Fatalf("response: type %q, %d bytes of resource; want the request's type and %d bytes", resp.GetTypeUrl(), len(got), len(big))
		}
		if *size <= len(big) || *size > len(big)+200 {
			t.Errorf("reported size %d, want the message's (a little over %d)", *size, len(big))
		}
		if err := s.SendMsg(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: tc.ackType, ResponseNonce: "n1"}); err != nil {
			t.Fatal(err)
		}
		err := s.RecvMsg(&resp)
		if tc.want == io.EOF {
			if err != io.EOF {
				t.Errorf("after an OK end: %v, want io.EOF", err)
			}
			continue
		}
		if status.Code(err) != codes.PermissionDenied || status.Convert(err).Message() != "node web-1: 100% refused" {
			t.Errorf("after the server's status: %v, want %v", err, end)
		}
	}
}

// TestH2StreamHonoursFlowControl: requests totalling three times the
// server's 64 KiB window, sent while the server is not reading, wait for
// its WINDOW_UPDATEs instead of overrunning it (grpc-go would end the
// connection with FLOW_CONTROL_ERROR), and all arrive in order; with the
// connection's window the one that binds, then the stream's.
func TestH2StreamHonoursFlowControl(t *testing.T) {
	const n, each = 20, 10 << 10
	for _, tc := range []struct {
		name               string
		stream, connection int32
	}{
		{"the connection's window binds", 1 << 20, 65535},
		{"the stream's window binds", 65535, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := startADS(t, adsHandler{serve: func(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
				time.Sleep(300 * time.Millisecond) // the client fills the windows meanwhile
				for k := 0; k < n; k++ {
					req, err := s.Recv()
					if err != nil {
						return err
					}
					if want := fmt.Sprintf("%d-%s", k, strings.Repeat("y", each)); req.GetResponseNonce() != want {
						return status.Errorf(codes.InvalidArgument, "request %d: nonce of %d bytes, not request %d's", k, len(req.GetResponseNonce()), k)
					}
				}
				return s.Send(&discoveryv3.DeltaDiscoveryResponse{Nonce: "all"})
			}}, grpc.InitialWindowSize(tc.stream), grpc.InitialConnWindowSize(tc.connection))
			s, _ := dialTestH2(t, addr)
			for k := 0; k < n; k++ {
				if err := s.SendMsg(&discoveryv3.DeltaDiscoveryRequest{ResponseNonce: fmt.Sprintf("%d-%s", k, strings.Repeat("y", each))}); err != nil {
					t.Fatal(err)
				}
			}
			s.wmu.Lock()
			queued := len(s.out)
			s.wmu.Unlock()
			if queued == 0 {
				t.Fatal("nothing waited for the server's windows; the test needs more than they admit")
			}
			_ = s.conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // fail, not hang, if queued bytes never go
			var resp discoveryv3.DeltaDiscoveryResponse
			if err := s.RecvMsg(&resp); err != nil || resp.GetNonce() != "all" {
				t.Fatalf("got %q, %v; want the server's answer to all %d requests", resp.GetNonce(), err, n)
			}
		})
	}
}

// TestH2StreamAnswersPings: grpc-go's server pings an idle connection and
// closes it when the ping goes unanswered; the stream answers, so it is
// still open when the server sends after three ping intervals.
func TestH2StreamAnswersPings(t *testing.T) {
	addr := startADS(t, adsHandler{serve: func(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
		if _, err := s.Recv(); err != nil {
			return err
		}
		time.Sleep(3500 * time.Millisecond)
		return s.Send(&discoveryv3.DeltaDiscoveryResponse{Nonce: "late"})
	}}, grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Second, Timeout: 500 * time.Millisecond}))
	s, _ := dialTestH2(t, addr)
	if err := s.SendMsg(&discoveryv3.DeltaDiscoveryRequest{}); err != nil {
		t.Fatal(err)
	}
	var resp discoveryv3.DeltaDiscoveryResponse
	if err := s.RecvMsg(&resp); err != nil || resp.GetNonce() != "late" {
		t.Fatalf("got %q, %v; want the late response on a connection kept alive", resp.GetNonce(), err)
	}
}

// TestH2StreamClose: Close ends a waiting read with context.Canceled,
// which the client's read loop does not record as the stream's error.
func TestH2StreamClose(t *testing.T) {
	addr := startADS(t, adsHandler{serve: func(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
		<-s.Context().Done()
		return nil
	}})
	s, _ := dialTestH2(t, addr)
	got := make(chan error, 1)
	go func() { got <- s.RecvMsg(new(discoveryv3.DeltaDiscoveryResponse)) }()
	time.Sleep(100 * time.Millisecond)
	s.Close()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("read after Close: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the read")
	}
}

// TestH2StreamReplenishesItsWindow: with a 64 KiB window the stream must
// send WINDOW_UPDATEs as it reads, or the server stops after the first
// 64 KiB of 600.
func TestH2StreamReplenishesItsWindow(t *testing.T) {
	old := h2Window
	h2Window = 65535
	t.Cleanup(func() { h2Window = old })
	const n = 20
	body := []byte(strings.Repeat("z", 30<<10))
	addr := startADS(t, adsHandler{serve: func(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
		if _, err := s.Recv(); err != nil {
			return err
		}
		for k := 0; k < n; k++ {
			if err := s.Send(&discoveryv3.DeltaDiscoveryResponse{Nonce: fmt.Sprint(k), Resources: []*discoveryv3.Resource{{Resource: &anypb.Any{Value: body}}}}); err != nil {
				return err
			}
		}
		<-s.Context().Done()
		return nil
	}})
	s, _ := dialTestH2(t, addr)
	if err := s.SendMsg(&discoveryv3.DeltaDiscoveryRequest{}); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		for k := 0; k < n; k++ {
			var resp discoveryv3.DeltaDiscoveryResponse
			if err := s.RecvMsg(&resp); err != nil {
				got <- err
				return
			}
			if resp.GetNonce() != fmt.Sprint(k) {
				got <- fmt.Errorf("response %d has nonce %q", k, resp.GetNonce())
				return
			}
		}
		got <- nil
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server stalled: the stream did not replenish its receive window")
	}
}

// droppingListener closes its first connections at once, as a server
// too busy to finish their handshakes does.
type droppingListener struct {
	net.Listener
	drop atomic.Int32
}

func (l *droppingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.drop.Add(-1) < 0 {
			return c, err
		}
		c.Close()
	}
}

// TestH2StreamRetriesADroppedConnect: connections the server closes
// before its SETTINGS are dialled again (grpc.WaitForReady's and Envoy's
// behaviour), and the stream then works.
func TestH2StreamRetriesADroppedConnect(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &droppingListener{Listener: inner}
	lis.drop.Store(2)
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, adsHandler{serve: func(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
		if _, err := s.Recv(); err != nil {
			return err
		}
		return s.Send(&discoveryv3.DeltaDiscoveryResponse{Nonce: "after-retries"})
	}})
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	s, _ := dialTestH2(t, inner.Addr().String())
	if err := s.SendMsg(&discoveryv3.DeltaDiscoveryRequest{}); err != nil {
		t.Fatal(err)
	}
	var resp discoveryv3.DeltaDiscoveryResponse
	if err := s.RecvMsg(&resp); err != nil || resp.GetNonce() != "after-retries" {
		t.Fatalf("got %q, %v; want the response on the connection after two dropped", resp.GetNonce(), err)
	}
	if n := lis.drop.Load(); n >= 0 {
		t.Errorf("%d drops left: the test did not drop connections", n+1)
	}
}

// TestH2StreamSettingsReleaseQueuedBytes: a larger initial window in the
// server's SETTINGS (grpc-go's BDP estimate raises a stream's window only
// this way) sends what waited for it, before the SETTINGS ACK.
func TestH2StreamSettingsReleaseQueuedBytes(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	s := &h2Stream{conn: client, connWin: 1 << 20, streamWin: 0, initWin: h2DefaultWindow, maxFrame: h2DefaultFrame}
	s.bw = bufio.NewWriter(client)
	s.w = http2.NewFramer(s.bw, nil)
	s.out = []byte(strings.Repeat("q", 300))

	var b bytes.Buffer
	if err := http2.NewFramer(&b, nil).WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2DefaultWindow + 100}); err != nil {
		t.Fatal(err)
	}
	f, err := http2.NewFramer(nil, &b).ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.frame(f) }()
	peer := http2.NewFramer(nil, server)
	got, err := peer.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := got.(*http2.DataFrame); !ok || len(d.Data()) != 100 {
		t.Fatalf("first frame after the SETTINGS: %v, want DATA of the 100 bytes the window grew by", got)
	}
	if ack, err := peer.ReadFrame(); err != nil || !ack.(*http2.SettingsFrame).IsAck() {
		t.Fatalf("then %v, %v; want the SETTINGS ACK", ack, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(s.out) != 200 {
		t.Errorf("%d bytes still queued, want 200", len(s.out))
	}
}
