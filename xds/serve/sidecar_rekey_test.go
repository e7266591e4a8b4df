package serve

import (
	"context"
	"net/url"
	"testing"

	"crypto/x509"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// TestKeyingJudgesWhatTheStreamIsKeyedTo: under authorize_nodes a stream
// is authorized (authzInterceptor) before the sidecar lookup keys it, so
// a registration may come or go in between. Keying judges the
// certificate again against what the stream is keyed to, either way
// round: a sidecar registered meanwhile needs its service named; a node
// authorized as web's sidecar whose registration went away is an
// ordinary node of the group it announced, which web's Connect leaf
// does not authorize (it was served that group).
func TestKeyingJudgesWhatTheStreamIsKeyedTo(t *testing.T) {
	webLeaf := &x509.Certificate{URIs: []*url.URL{{Scheme: "spiffe", Host: "td.consul", Path: "/ns/default/dc/dc1/svc/web"}}}
	edgeCert := &x509.Certificate{URIs: []*url.URL{{Scheme: "spiffe", Host: "td", Path: "/group/edge"}}}
	stream := func(sc *sidecars, cert *x509.Certificate) *sidecarStream {
		ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: tlsInfoWith(cert)})
		return &sidecarStream{ServerStream: &queuedStream{ctx: ctx}, sc: sc, ctx: ctx}
	}
	node := &corev3.Node{Id: "web-sidecar-proxy", Cluster: "web"}
	web := SidecarInfo{Node: "vm-a", Service: "web"}

	// Registration gone: web's leaf, announcing "web", is no member of
	// group web.
	sc := newSidecars(zerolog.Nop(), true)
	sc.authorize = true
	if _, err := stream(sc, webLeaf).keyNode(node); status.Code(err) != codes.PermissionDenied {
		t.Errorf("web's leaf keyed as group web after its registration went: %v, want PermissionDenied", err)
	}
	// Registered: the same certificate is web's sidecar.
	sc.set(map[string][]SidecarInfo{"web-sidecar-proxy": {web}})
	if n, err := stream(sc, webLeaf).keyNode(node); err != nil || n.GetCluster() != web.Group("web-sidecar-proxy") {
		t.Errorf("web's leaf as web's registered sidecar: %v %v", n.GetCluster(), err)
	}
	// Registered meanwhile: an edge certificate that claims the sidecar's
	// id is refused.
	if _, err := stream(sc, edgeCert).keyNode(&corev3.Node{Id: "web-sidecar-proxy", Cluster: "edge"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("an edge certificate keyed as web's sidecar: %v, want PermissionDenied", err)
	}
	// An ordinary node its certificate authorizes is keyed as announced.
	if n, err := stream(sc, edgeCert).keyNode(&corev3.Node{Id: "edge-1", Cluster: "edge"}); err != nil || n.GetCluster() != "edge" {
		t.Errorf("edge-1 in edge: %v %v", n.GetCluster(), err)
	}
}
