package serve_test

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/irtest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// Model builders shared with the serving tests (internal/irtest).
var (
	cluster      = irtest.Cluster
	ep           = irtest.Endpoint
	httpListener = irtest.HTTPListener
	routeTo      = irtest.RouteTo
	certSecret   = irtest.CertSecret
	tlsModel     = irtest.TLSModel
)

func translate(t *testing.T, m *ir.Model) *xds.Output {
	t.Helper()
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatalf("Translate: %v", err)
	}
	return out
}

func resolveGroup(nodeCluster string) string {
	if nodeCluster == "edge" {
		return "edge"
	}
	return ""
}

// serveTLSModel serves out over ADS on a loopback port and returns the
// server and its address.
func serveTLSModel(t *testing.T, out *xds.Output) (*serve.Server, string) {
	t.Helper()
	srv := serve.NewServer(serve.ServerConfig{})
	if _, err := srv.Update(context.Background(), out, resolveGroup); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, lis); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv, lis.Addr().String()
}

func dialGroup(t *testing.T, addr, nodeCluster string, mode adsclient.Mode) *adsclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: addr, NodeID: nodeCluster + "-1", Cluster: nodeCluster, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func waitFor(t *testing.T, c *adsclient.Client, what string, pred func(adsclient.State) bool) adsclient.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Wait(ctx, pred)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	return st
}

func chainOf(s *tlsv3.Secret) string {
	return s.GetTlsCertificate().GetCertificateChain().GetInlineString()
}

// TestCertificateRotationChangesOnlySDS: a proxy gets its group's secrets
// and the shared ones over ADS; a new certificate under the same name is
// a new SDS version and nothing else. Listeners name secrets and never
// carry PEM, so their version stays and Envoy does not drain them.
func TestCertificateRotationChangesOnlySDS(t *testing.T) {
	for _, mode := range []adsclient.Mode{adsclient.SotW, adsclient.Delta} {
		t.Run(mode.String(), func(t *testing.T) {
			out := translate(t, tlsModel("1"))
			for _, l := range out.Groups["edge"].Listeners {
				b, _ := protojson.Marshal(l)
				if strings.Contains(string(b), "BEGIN") || strings.Contains(string(b), "CERT-") {
					t.Fatalf("listener carries PEM: %s", b)
				}
			}
			srv, addr := serveTLSModel(t, out)
			edge := dialGroup(t, addr, "edge", mode)
			other := dialGroup(t, addr, "other", mode)
			all := []string{"api/ca", "api/cert", "edge.https/cert/blog", "edge.https/cert/shop"}
			st := waitFor(t, edge, "listener and secrets", func(s adsclient.State) bool {
				return s.Listener("edge.https") != nil && slices.Equal(s.SecretNames(), all)
			})
			// A node in no group (unmatched_nodes = "all") gets the
			// cluster but never a secret: not the upstream client key,
			// not the group's certificates.
			waitFor(t, other, "the cluster without secrets", func(s adsclient.State) bool {
				return s.Cluster("api") != nil
			})
			time.Sleep(100 * time.Millisecond) // its (empty) SDS answer, if any
			if got := chainOf(st.Secret("edge.https/cert/shop")); !strings.Contains(got, "CERT-shop-1") {
				t.Fatalf("shop secret = %q", got)
			}
			ldsVersion, ldsResponses := st.Version(adsclient.ListenerType), edge.Stats().Responses[adsclient.ListenerType]
			otherSDS := other.Snapshot().Version(adsclient.SecretType)

			changed, err := srv.Update(context.Background(), translate(t, tlsModel("2")), resolveGroup)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(changed, []string{resourcev3.SecretType}) {
				t.Errorf("changed types = %v, want only SDS", changed)
			}
			st = waitFor(t, edge, "rotated certificate", func(s adsclient.State) bool {
				return strings.Contains(chainOf(s.Secret("edge.https/cert/shop")), "CERT-shop-2")
			})
			if v := st.Version(adsclient.ListenerType); v != ldsVersion {
				t.Errorf("listener version changed with a certificate: %s -> %s", ldsVersion, v)
			}
			time.Sleep(200 * time.Millisecond)
			if n := edge.Stats().Responses[adsclient.ListenerType]; n != ldsResponses {
				t.Errorf("%d listener responses after a certificate rotation, want none", n-ldsResponses)
			}
			if v := other.Snapshot().Version(adsclient.SecretType); v != otherSDS {
				t.Error("a proxy outside the group got a new SDS version for the group's certificate")
			}
			if n := edge.Stats().NACKs; len(n) > 0 {
				t.Errorf("NACKs: %v", n)
			}

			// Rotating an upstream client certificate reaches the
			// proxies whose clusters use it, with CDS untouched.
			m := tlsModel("2")
			m.Secrets[1] = certSecret("api/cert", "client-2")
			if changed, err = srv.Update(context.Background(), translate(t, m), resolveGroup); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(changed, []string{resourcev3.SecretType}) {
				t.Errorf("changed types = %v, want only SDS", changed)
			}
			waitFor(t, edge, "rotated upstream certificate", func(s adsclient.State) bool {
				return strings.Contains(chainOf(s.Secret("api/cert")), "CERT-client-2")
			})
			time.Sleep(200 * time.Millisecond)
			if names := other.Snapshot().SecretNames(); len(names) > 0 {
				t.Errorf("a node in no group holds secrets %v", names)
			}
		})
	}
}

// TestConfigDumpRedactsKeys: /v1/config_dump shows certificates but
// "[redacted]" for private keys, like Envoy's admin; what is served keeps
// the key.
func TestConfigDumpRedactsKeys(t *testing.T) {
	srv, addr := serveTLSModel(t, translate(t, tlsModel("1")))
	edge := dialGroup(t, addr, "edge", adsclient.SotW)
	st := waitFor(t, edge, "secrets", func(s adsclient.State) bool { return len(s.SecretNames()) == 4 })
	d, err := srv.ConfigDump("edge-1", "")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(d)
	if strings.Contains(string(raw), "KEY-") {
		t.Fatalf("config dump shows a private key: %s", raw)
	}
	if d.Versions["SDS"] == "" || d.Versions["SDS"] != st.Version(adsclient.SecretType) {
		t.Errorf("dump SDS version %q, served %q", d.Versions["SDS"], st.Version(adsclient.SecretType))
	}
	var secret struct {
		Name           string `json:"name"`
		TLSCertificate struct {
			CertificateChain struct {
				InlineString string `json:"inline_string"`
			} `json:"certificate_chain"`
			PrivateKey struct {
				InlineString string `json:"inline_string"`
			} `json:"private_key"`
		} `json:"tls_certificate"`
	}
	if len(d.Secrets) != 4 {
		t.Fatalf("dump has %d secrets", len(d.Secrets))
	}
	if err := json.Unmarshal(d.Secrets[2], &secret); err != nil {
		t.Fatal(err)
	}
	if secret.Name != "edge.https/cert/blog" || !strings.Contains(secret.TLSCertificate.CertificateChain.InlineString, "CERT-blog-1") || secret.TLSCertificate.PrivateKey.InlineString != "[redacted]" {
		t.Errorf("dumped secret = %+v", secret)
	}
	if !strings.Contains(st.Secret("edge.https/cert/blog").GetTlsCertificate().GetPrivateKey().GetInlineString(), "KEY-blog-1") {
		t.Error("the served secret lost its key")
	}
	// Redaction works on a copy: the cache keeps the key.
	served := srv.Served("edge", resourcev3.SecretType)["edge.https/cert/blog"].(*tlsv3.Secret)
	if !strings.Contains(served.GetTlsCertificate().GetPrivateKey().GetInlineString(), "KEY-blog-1") {
		t.Error("redacting the dump changed the cached secret")
	}
}
