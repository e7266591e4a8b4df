package serve

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// TestRESTRefusesCertificateOfAnotherGroup: under authorize_nodes, a
// REST-JSON poll over mutual TLS whose certificate names group web (URI
// SAN /group/web) but whose node claims group edge gets 403 and no
// resources, for every type; the edge certificate on the same transport
// is served, so the refusal comes from node authorization at serveFetch
// (not from TLS or a missing world).
func TestRESTRefusesCertificateOfAnotherGroup(t *testing.T) {
	ca := newTestCA(t)
	s := startServer(t, ServerConfig{TLS: serverTLSFiles(t, ca), AuthorizeNodes: true})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	rest := func(certPEM, keyPEM []byte) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(t, ca, certPEM, keyPEM)}}
	}
	base := "https://" + s.addr
	edge := &corev3.Node{Id: "edge-1", Cluster: "edge"}
	ctx := waitCtx(t)

	webCert, webKey := ca.issue(t, 40, nil, "spiffe://example.org/group/web")
	web := rest(webCert, webKey)
	for _, typ := range []string{adsclient.ClusterType, adsclient.EndpointType, adsclient.ListenerType, adsclient.SecretType} {
		r, err := adsclient.FetchREST(ctx, web, base, typ, edge, "")
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if r.Status != http.StatusForbidden || len(r.Resources) != 0 || strings.Contains(r.Body, "api") {
			t.Errorf("web certificate polling %s as edge: %d %q (%d resources), want 403 and nothing served", typ, r.Status, r.Body, len(r.Resources))
		}
		if !strings.Contains(r.Body, `group "edge"`) {
			t.Errorf("%s refusal %q does not name the group claimed", typ, r.Body)
		}
	}

	edgeCert, edgeKey := ca.issue(t, 41, nil, "spiffe://example.org/group/edge")
	r, err := adsclient.FetchREST(ctx, rest(edgeCert, edgeKey), base, adsclient.ClusterType, edge, "")
	if err != nil || r.Status != http.StatusOK || r.Resources["api"] == nil {
		t.Fatalf("edge certificate polling CDS as edge: %+v %v, want 200 with api", r, err)
	}
}

// TestNodeSANAuthorizesThatNodeOnly: a certificate whose URI SAN is
// /group/edge/node/edge-1 may not stream as edge-2 of the same group
// (PermissionDenied, nothing received); as edge-1 it is served.
func TestNodeSANAuthorizesThatNodeOnly(t *testing.T) {
	ca := newTestCA(t)
	s := startServer(t, ServerConfig{TLS: serverTLSFiles(t, ca), AuthorizeNodes: true})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	certPEM, keyPEM := ca.issue(t, 50, nil, "spiffe://example.org/group/edge/node/edge-1")

	try := func(nodeID string) (adsclient.State, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: s.addr, NodeID: nodeID, Cluster: "edge", TLS: clientTLS(t, ca, certPEM, keyPEM), InitialFetchTimeout: -1})
		if err != nil {
			return adsclient.State{}, err
		}
		t.Cleanup(func() { _ = c.Close() })
		st, err := c.Wait(ctx, func(st adsclient.State) bool { return len(st.ClusterNames()) > 0 })
		if c.Err() != nil {
			return c.Snapshot(), c.Err()
		}
		return st, err
	}

	st, err := try("edge-2")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `node "edge-2"`) {
		t.Fatalf("certificate of edge-1 streaming as edge-2: err = %v, want PermissionDenied naming edge-2", err)
	}
	if n := len(st.ClusterNames()) + len(st.ListenerNames()); n != 0 {
		t.Fatalf("refused node edge-2 received %d resources", n)
	}
	if _, err := try("edge-1"); err != nil {
		t.Fatalf("certificate of edge-1 streaming as edge-1: %v", err)
	}
}
