package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/testpki"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// testCA adapts testpki to this file's tests.
type testCA struct {
	*testpki.CA
	pem []byte
}

func newTestCA(t *testing.T) *testCA {
	ca := testpki.New(t)
	return &testCA{CA: ca, pem: ca.PEM}
}

// issue returns PEM cert and key with the given serial and SANs.
func (ca *testCA) issue(t *testing.T, serial int64, dns []string, uris ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	return ca.Issue(testpki.Leaf{Serial: serial, DNS: dns, URIs: uris})
}

// serverTLSFiles writes a server certificate for bridge.test from ca and
// ca itself (for client certificates) and names them.
func serverTLSFiles(t *testing.T, ca *testCA) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	files := TLSFiles{CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server-key.pem"), ClientCAFile: filepath.Join(dir, "ca.pem")}
	srvCert, srvKey := ca.issue(t, 10, []string{"bridge.test"})
	writeFile(t, files.CertFile, srvCert)
	writeFile(t, files.KeyFile, srvKey)
	writeFile(t, files.ClientCAFile, ca.pem)
	return files
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	testpki.ReplaceFile(t, path, b, 0o600)
}

func clientTLS(t *testing.T, ca *testCA, certPEM, keyPEM []byte) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	cfg := &tls.Config{RootCAs: pool, ServerName: "bridge.test"}
	if certPEM != nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// TestMutualTLSAndNodeAuthorization: without a client certificate a
// client is refused; a certificate for group web asking as edge gets
// PermissionDenied; the right certificate is served; a rotated server
// certificate is used by new handshakes without a restart.
func TestMutualTLSAndNodeAuthorization(t *testing.T) {
	ca := newTestCA(t)
	files := serverTLSFiles(t, ca)
	s := startServer(t, ServerConfig{TLS: files, AuthorizeNodes: true})
	s.update(t, testOutput(t, []string{"api"}, 8080))

	dial := func(tlsCfg *tls.Config, cluster string) (*adsclient.Client, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: s.addr, NodeID: cluster + "-1", Cluster: cluster, TLS: tlsCfg, InitialFetchTimeout: -1})
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = c.Close() })
		_, err = c.Wait(ctx, func(st adsclient.State) bool { return len(st.ClusterNames()) > 0 })
		if err != nil && c.Err() != nil {
			return c, c.Err()
		}
		return c, err
	}

	if _, err := dial(clientTLS(t, ca, nil, nil), "edge"); err == nil {
		t.Fatal("a client without a certificate was served")
	}

	webCert, webKey := ca.issue(t, 20, nil, "spiffe://example.org/group/web")
	_, err := dial(clientTLS(t, ca, webCert, webKey), "edge")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `group "edge"`) {
		t.Fatalf("web certificate asking as edge: err = %v, want PermissionDenied", err)
	}

	edgeCert, edgeKey := ca.issue(t, 30, nil, "spiffe://example.org/group/edge/node/edge-1")
	c, err := dial(clientTLS(t, ca, edgeCert, edgeKey), "edge")
	if err != nil {
		t.Fatalf("edge certificate as edge-1: %v", err)
	}
	if len(c.Snapshot().ListenerNames()) == 0 && len(c.Snapshot().ClusterNames()) == 0 {
		t.Fatal("authorized client got nothing")
	}
	dnsCert, dnsKey := ca.issue(t, 31, []string{"edge"})
	if _, err := dial(clientTLS(t, ca, dnsCert, dnsKey), "edge"); err != nil {
		t.Fatalf("DNS SAN edge as group edge: %v", err)
	}

	// A stream whose first request names no node would be served as
	// node.cluster "" (which a "*" group matches): refused. So is a
	// stream that changes its node after the first request.
	raw := func(requests ...*discoveryv3.DiscoveryRequest) error {
		t.Helper()
		conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(t, ca, dnsCert, dnsKey))))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(waitCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range requests {
			if err := stream.Send(r); err != nil {
				break
			}
		}
		for {
			if _, err := stream.Recv(); err != nil {
				return err
			}
		}
	}
	err = raw(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.SecretType})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "must carry its node") {
		t.Errorf("a stream without a node: err = %v, want InvalidArgument", err)
	}
	err = raw(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, Node: &corev3.Node{Id: "edge-a", Cluster: "edge"}},
		&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ListenerType, Node: &corev3.Node{Id: "edge-b", Cluster: "edge"}})
	// The switch ends the stream with authorization's refusal (a failed
	// read's status reaches the client, readEnd); it is never served as
	// the other node.
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "cannot become") {
		t.Errorf("a stream that changes its node: err = %v, want PermissionDenied", err)
	}

	// Rotation: new handshakes see the new serial.
	rotCert, rotKey := ca.issue(t, 99, []string{"bridge.test"})
	time.Sleep(10 * time.Millisecond) // distinct mtime
	writeFile(t, files.KeyFile, rotKey)
	writeFile(t, files.CertFile, rotCert)
	cfg := clientTLS(t, ca, edgeCert, edgeKey)
	conn, err := tls.Dial("tcp", s.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); got != 99 {
		t.Fatalf("after rotation the server presents serial %d, want 99", got)
	}

	// A broken rotation keeps the last good certificate.
	writeFile(t, files.CertFile, []byte("not a certificate"))
	conn2, err := tls.Dial("tcp", s.addr, cfg)
	if err != nil {
		t.Fatalf("handshake after a broken rotation: %v", err)
	}
	defer conn2.Close()
	if got := conn2.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); got != 99 {
		t.Fatalf("after a broken rotation the server presents serial %d, want the last good 99", got)
	}
}
