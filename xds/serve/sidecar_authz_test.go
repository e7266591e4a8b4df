package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// startAuthorizedSidecars serves sidecarOutput over mTLS with
// authorize_nodes and sidecars, web-sidecar-proxy registered as web's.
func startAuthorizedSidecars(t *testing.T) (*testServer, *testCA) {
	t.Helper()
	ca := newTestCA(t)
	s := startServer(t, ServerConfig{TLS: serverTLSFiles(t, ca), AuthorizeNodes: true, Sidecars: true})
	if _, err := s.Update(context.Background(), sidecarOutput(t), resolveSidecars); err != nil {
		t.Fatal(err)
	}
	s.SetSidecars(map[string][]SidecarInfo{"web-sidecar-proxy": {webInfo}})
	return s, ca
}

// TestSidecarNeedsItsServicesCertificate: under authorize_nodes a client
// whose certificate authorizes the node.cluster it announces still gets
// nothing as a Connect sidecar (known by node id, holding its service's
// identity) unless the certificate names that service: web's Connect
// SPIFFE id or /group/web. Over gRPC and REST.
func TestSidecarNeedsItsServicesCertificate(t *testing.T) {
	s, ca := startAuthorizedSidecars(t)

	dial := func(tlsCfg *tls.Config) ([]uint32, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: s.addr, NodeID: "web-sidecar-proxy", Cluster: "edge", TLS: tlsCfg, InitialFetchTimeout: -1})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		st, err := c.Wait(ctx, func(st adsclient.State) bool { return len(listenerPorts(st)) > 0 })
		if err != nil && c.Err() != nil {
			return nil, c.Err()
		}
		return listenerPorts(st), err
	}

	// An edge proxy's certificate: fine as edge, not as web's sidecar.
	edgeCert, edgeKey := ca.issue(t, 20, nil, "spiffe://example.org/group/edge")
	if _, err := dial(clientTLS(t, ca, edgeCert, edgeKey)); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `sidecar of "web"`) {
		t.Fatalf("edge certificate as web's sidecar: err = %v, want PermissionDenied naming web", err)
	}
	// api's Connect identity is not web's.
	apiCert, apiKey := ca.issue(t, 21, nil, "spiffe://td.consul/ns/default/dc/dc1/svc/api")
	if _, err := dial(clientTLS(t, ca, apiCert, apiKey)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("api's Connect certificate as web's sidecar: err = %v, want PermissionDenied", err)
	}
	for name, uris := range map[string][]string{
		// A plain Connect leaf: only the service's SPIFFE id, nothing
		// for the node.cluster it announces.
		"web's Connect leaf": {"spiffe://td.consul/ns/default/dc/dc1/svc/web"},
		"group web":          {"spiffe://example.org/group/web"},
	} {
		cert, key := ca.issue(t, int64(30+len(name)), nil, uris...)
		ports, err := dial(clientTLS(t, ca, cert, key))
		if err != nil || len(ports) != 1 || ports[0] != 21000 {
			t.Fatalf("%s: ports %v, err %v; want the sidecar's listener on 21000", name, ports, err)
		}
	}

	// REST: the same rule.
	rest := func(certPEM []byte) int {
		code, _ := s.restAuthorize(context.WithValue(context.Background(), tlsStateKey{}, tls.ConnectionState{PeerCertificates: mustParse(t, certPEM)}), sidecarNode())
		return code
	}
	if code := rest(edgeCert); code != 403 {
		t.Fatalf("REST with an edge certificate as web's sidecar: status %d, want 403", code)
	}
	webLeaf, _ := ca.issue(t, 40, nil, "spiffe://td.consul/ns/default/dc/dc1/svc/web")
	if code := rest(webLeaf); code != 0 {
		t.Fatalf("REST with web's Connect leaf as web's sidecar: status %d, want allowed", code)
	}
	// Not a sidecar: the node.cluster it announces decides, as before.
	if code, _ := s.restAuthorize(context.WithValue(context.Background(), tlsStateKey{}, tls.ConnectionState{PeerCertificates: mustParse(t, edgeCert)}), &corev3.Node{Id: "edge-1", Cluster: "edge"}); code != 0 {
		t.Fatalf("REST with an edge certificate as an edge proxy: status %d, want allowed", code)
	}
}

func mustParse(t *testing.T, certPEM []byte) []*x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return []*x509.Certificate{c}
}

func sidecarNode() *corev3.Node { return &corev3.Node{Id: "web-sidecar-proxy", Cluster: "edge"} }

// restAuthorize is serveFetch's authorization of a poll: keyed, then
// judged on what the key stands for.
func (s *Server) restAuthorize(ctx context.Context, node *corev3.Node) (int, string) {
	_, info, _ := s.sidecars.restKey(node)
	return s.authorizeREST(ctx, node, info)
}
