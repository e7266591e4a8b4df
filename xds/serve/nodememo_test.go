package serve

import (
	"crypto/x509"
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/envoynode"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
)

// TestEnvoyNodeDecodedOncePerStream: an Envoy sending its whole node with
// every request (its default), SotW and delta, has it decoded once per
// stream through a sync and an update, and the node the server keeps has
// no extension list.
func TestEnvoyNodeDecodedOncePerStream(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api", "db"}, 8080))
	for _, mode := range []adsclient.Mode{adsclient.SotW, adsclient.Delta} {
		id := fmt.Sprintf("envoy-%v", mode)
		before := cache.NodeDecodes()
		c := dial(t, s, adsclient.Config{NodeID: id, Cluster: "edge", Mode: mode, Extensions: envoynode.Extensions()})
		if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.LoadAssignmentNames()) == 2 }); err != nil {
			t.Fatal(err)
		}
		s.waitStatus(t, id, "EDS", "SYNCED")
		s.update(t, testOutput(t, []string{"api", "db"}, 8081))
		want := s.current("edge", resourcev3.EndpointType)
		if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return st.Version(resourcev3.EndpointType) == want }); err != nil {
			t.Fatal(err)
		}
		p := s.waitStatus(t, id, "EDS", "SYNCED")
		if p.Types["EDS"].VersionAcked != want {
			t.Fatalf("%s: EDS acked %q, want %q", id, p.Types["EDS"].VersionAcked, want)
		}
		if got := cache.NodeDecodes() - before; got != 1 {
			t.Errorf("%s: node decoded %d times over %d ACKed responses, want once", id, got, len(c.Responses()))
		}
		s.tracker.mu.Lock()
		for _, st := range s.tracker.streams {
			if st.node.GetId() == id && len(st.node.GetExtensions()) > 0 {
				t.Errorf("%s: the server keeps the node's %d extensions", id, len(st.node.GetExtensions()))
			}
		}
		s.tracker.mu.Unlock()
		_ = c.Close()
	}
}

// TestAuthorizationOncePerNode: a stream whose requests share one node
// (the memo's) has it authorized once; another node, even an equal one,
// is authorized again, and one claiming another identity is refused.
func TestAuthorizationOncePerNode(t *testing.T) {
	calls := 0
	s := &authzStream{authorize: func(*x509.Certificate, *corev3.Node) (bool, string) { calls++; return true, "" }}
	node := &corev3.Node{Id: "web-1", Cluster: "web"}
	for range 3 {
		if err := s.check(&discoveryv3.DeltaDiscoveryRequest{Node: node}); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Fatalf("one node authorized %d times, want once", calls)
	}
	if err := s.check(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "web-1", Cluster: "web"}}); err != nil || calls != 2 {
		t.Fatalf("another node with the same identity: %v, %d authorizations, want served after a second", err, calls)
	}
	if err := s.check(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "web-2", Cluster: "web"}}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a node claiming another identity: %v, want PermissionDenied", err)
	}
}
