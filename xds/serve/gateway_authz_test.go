package serve

import (
	"context"
	"crypto/tls"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// TestGatewayNeedsItsOwnCertificate: under authorize_nodes a gateway,
// keyed by its service id like a sidecar, is served only to a client
// whose certificate names the gateway's own service: neither another
// proxy's certificate nor that of a service the gateway links (whose
// holder would otherwise get the other linked services' keys in central
// mode).
func TestGatewayNeedsItsOwnCertificate(t *testing.T) {
	s, ca := startAuthorizedSidecars(t)
	s.SetSidecars(map[string][]SidecarInfo{
		"web-sidecar-proxy": {webInfo},
		"tgw":               {{Node: "vm-c", Service: "tgw", Kind: "terminating-gateway", Upstreams: []string{"ext1@ext1.default.dc1.internal.td.consul", "ext2@ext2.default.dc1.internal.td.consul"}}},
	})
	rest := func(uri string, serial int64) int {
		cert, _ := ca.issue(t, serial, nil, uri)
		code, _ := s.restAuthorize(context.WithValue(context.Background(), tlsStateKey{}, tls.ConnectionState{PeerCertificates: mustParse(t, cert)}), &corev3.Node{Id: "tgw", Cluster: "tgw"})
		return code
	}
	for uri, want := range map[string]int{
		"spiffe://td.consul/ns/default/dc/dc1/svc/ext1": 403, // a linked service's leaf
		"spiffe://td.consul/ns/default/dc/dc1/svc/web":  403,
		"spiffe://example.org/group/edge":               403,
		"spiffe://td.consul/ns/default/dc/dc1/svc/tgw":  0,
		"spiffe://example.org/group/tgw":                0,
	} {
		if got := rest(uri, int64(50+len(uri))); got != want {
			t.Errorf("%s as gateway tgw: status %d, want %d", uri, got, want)
		}
	}
}
