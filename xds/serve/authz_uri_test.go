package serve

import (
	"crypto/x509"
	"net/url"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// TestCertificateAuthorizesExactly: a URI SAN authorizes a group only
// when its path is exactly /group/G (any node id) or /group/G/node/N
// (that node), as securing-the-xds-port.md says; anything before or after
// is no authorization, so a CA that lets workloads pick their paths
// cannot be used to claim a group by ending a path in it.
func TestCertificateAuthorizesExactly(t *testing.T) {
	edge1 := &corev3.Node{Id: "edge-1", Cluster: "edge"}
	for _, tc := range []struct {
		san  string
		node *corev3.Node
		want bool
	}{
		{"spiffe://td/group/edge", edge1, true},
		{"spiffe://td/group/edge/node/edge-1", edge1, true},
		{"spiffe://td/group/edge/node/edge-2", edge1, false},
		{"spiffe://td/team-a/anything/group/edge", edge1, false},
		{"spiffe://td/x/group/edge/node/edge-1", edge1, false},
		{"spiffe://td/group/edge/extra", edge1, false},
		{"spiffe://td/group/edge/node/edge-1/x", edge1, false},
		{"spiffe://td/group/edge/", edge1, false},
		{"spiffe://td//group/edge", edge1, false},
		{"spiffe://td/group/web", edge1, false},
		{"spiffe://td/group/", &corev3.Node{Id: "x"}, false},
		{"spiffe://td/group//node/", &corev3.Node{}, false},
	} {
		u, err := url.Parse(tc.san)
		if err != nil {
			t.Fatal(err)
		}
		if got := authorized(&x509.Certificate{URIs: []*url.URL{u}}, tc.node); got != tc.want {
			t.Errorf("%s for %s/%s: %v, want %v", tc.san, tc.node.GetCluster(), tc.node.GetId(), got, tc.want)
		}
	}
	if !authorized(&x509.Certificate{DNSNames: []string{"edge"}}, edge1) || authorized(&x509.Certificate{DNSNames: []string{""}}, &corev3.Node{}) {
		t.Error("DNS SAN equal to node.cluster: want it to authorize that group, and an empty one nothing")
	}
}
