package adsclient

import (
	"context"
	"fmt"
	"net"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/h2wire"
)

// TestNoFlowControlPings: the client keeps fixed HTTP/2 windows, Envoy's
// defaults (16 MiB for a stream, 24 MiB for the connection), so it sends
// no PING when data arrives. With gRPC's default windows it estimated the
// bandwidth-delay product and pinged the server after the responses it
// received: an agent relaying to the central bridge cost the central a
// ping to read and an ack to write per push, about as much again as the
// push itself (the agent tier in bench/README.md).
func TestNoFlowControlPings(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &testServer{cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)}
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(ctx, s.cache, nil))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tee := &h2wire.Listener{Listener: lis}
	s.addr = lis.Addr().String()
	go func() { _ = gs.Serve(tee) }()
	defer gs.Stop()

	for _, mode := range []Mode{SotW, Delta} {
		s.set(t, makeSnapshot(t, "v0", map[string][]string{"api": {"10.0.0.1:80"}}))
		c := dial(t, s, Config{Mode: mode})
		for i := 1; i <= 20; i++ {
			v := fmt.Sprintf("%v-%d", mode, i)
			s.set(t, makeSnapshot(t, v, map[string][]string{"api": {fmt.Sprintf("10.0.0.%d:80", i+1)}}))
			want := fmt.Sprintf("10.0.0.%d:80", i+1)
			if _, err := c.Wait(waitCtx(t), func(st State) bool {
				eps := st.Endpoints("api")
				return len(eps) == 1 && eps[0].Address == want
			}); err != nil {
				t.Fatalf("%v: update %d: %v", mode, i, err)
			}
		}
		_ = c.Close()
	}
	gs.Stop()

	pings, windows, connGrants := 0, map[uint32]bool{}, map[uint32]bool{}
	err = tee.EachFrame(func(_ int, f http2.Frame) {
		switch f := f.(type) {
		case *http2.PingFrame:
			if !f.IsAck() {
				pings++
			}
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				windows[v] = true
			}
		case *http2.WindowUpdateFrame:
			// The connection's window starts at HTTP/2's 65,535 bytes;
			// the client raises it once, to its own size.
			if f.StreamID == 0 && f.Increment > 1<<20 {
				connGrants[f.Increment] = true
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if pings != 0 {
		t.Errorf("the client sent %d PINGs over 40 responses; want none (fixed windows)", pings)
	}
	if !windows[envoyStreamWindow] || len(windows) != 1 {
		t.Errorf("the client's stream windows: %v; want Envoy's %d", windows, envoyStreamWindow)
	}
	if want := uint32(envoyConnWindow - 65535); !connGrants[want] || len(connGrants) != 1 {
		t.Errorf("the client raised its connection window by %v; want Envoy's %d less HTTP/2's initial 65,535", connGrants, envoyConnWindow)
	}
}
