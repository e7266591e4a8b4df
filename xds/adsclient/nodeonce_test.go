package adsclient

import (
	"sync"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
)

// wireNodes records, per request as it came off the wire (before
// go-control-plane's server fills a missing node in from the stream's
// first), the node id it carried.
type wireNodes struct {
	grpc.ServerStream
	mu    *sync.Mutex
	nodes *[]string
}

func (w wireNodes) RecvMsg(m any) error {
	if err := w.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	id := ""
	switch r := m.(type) {
	case *discoveryv3.DiscoveryRequest:
		id = r.GetNode().GetId()
	case *discoveryv3.DeltaDiscoveryRequest:
		id = r.GetNode().GetId()
	}
	w.mu.Lock()
	*w.nodes = append(*w.nodes, id)
	w.mu.Unlock()
	return nil
}

// TestNodeOnFirstMessageOnly: with Envoy's set_node_on_first_message_only
// the stream's first request carries the node and no later one does, and
// go-control-plane's server (not ours), which keeps a stream's first node
// as the xDS protocol lets it, still serves every type through the EDS
// and RDS subscriptions that follow and an update after the ACKs. Without
// it every request carries the node, as Envoy's default does.
func TestNodeOnFirstMessageOnly(t *testing.T) {
	for _, mode := range []Mode{SotW, Delta} {
		for _, once := range []bool{true, false} {
			name := mode.String() + "/every-request"
			if once {
				name = mode.String() + "/first-only"
			}
			t.Run(name, func(t *testing.T) {
				var mu sync.Mutex
				var nodes []string
				s := startServerADS(t, true, grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
					return h(srv, wireNodes{ServerStream: ss, mu: &mu, nodes: &nodes})
				}))
				s.set(t, makeSnapshot(t, "1", map[string][]string{"api": {"10.0.0.1:8080"}}))
				c := dial(t, s, Config{Mode: mode, NodeOnFirstMessageOnly: once})
				wctx := waitCtx(t)
				if _, err := c.Wait(wctx, func(st State) bool {
					return len(st.Endpoints("api")) == 1 && st.Listener("http") != nil && st.RouteConfig("local_route") != nil
				}); err != nil {
					t.Fatal(err)
				}
				s.set(t, makeSnapshot(t, "2", map[string][]string{"api": {"10.0.0.1:8080", "10.0.0.2:8080"}}))
				if _, err := c.Wait(wctx, func(st State) bool { return len(st.Endpoints("api")) == 2 }); err != nil {
					t.Fatal(err)
				}
				// Every response ACKed, as the server's callbacks saw it:
				// their requests came through RecvMsg before.
				s.eventually(t, "ACKs for version 2", allAcked(mode, never))
				_ = c.Close()
				mu.Lock()
				defer mu.Unlock()
				// CDS, the EDS subscription, LDS, RDS and their ACKs: at
				// least 8 requests before version 2's.
				if len(nodes) < 8 {
					t.Fatalf("%d requests on the wire (%q), want the startup's and the ACKs", len(nodes), nodes)
				}
				if nodes[0] != testNode {
					t.Errorf("first request's node %q, want %q", nodes[0], testNode)
				}
				for i, id := range nodes[1:] {
					if want := map[bool]string{true: "", false: testNode}[once]; id != want {
						t.Errorf("request %d of %d carries node %q, want %q (all: %q)", i+1, len(nodes), id, want, nodes)
						break
					}
				}
			})
		}
	}
}
