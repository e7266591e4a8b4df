package bridge_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/testpki"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// edgeCA issues the certificates of the TLS tests.
type edgeCA struct {
	*testpki.CA
	pem []byte
}

func newEdgeCA(t *testing.T) *edgeCA {
	ca := testpki.New(t)
	return &edgeCA{CA: ca, pem: ca.PEM}
}

// issue returns a PEM certificate for dns, valid until notAfter, and its key.
func (ca *edgeCA) issue(dns string, notAfter time.Time) (certPEM, keyPEM []byte) {
	return ca.Issue(testpki.Leaf{DNS: []string{dns}, NotAfter: notAfter})
}

func replaceFile(t *testing.T, path string, b []byte, mode os.FileMode) {
	t.Helper()
	testpki.ReplaceFile(t, path, b, mode)
}

const tlsPolicy = `
service "api" {
  tls {
    sni       = "api.internal"
    ca_file   = "tls/ca.pem"
    cert_file = "tls/client.pem"
    key_file  = "tls/client-key.pem"
  }
}

proxy "edge" {
  listener "https" {
    port = 8443
    tls {
      certificate "shop" {
        cert_file = "tls/shop.pem"
        key_file  = "tls/shop-key.pem"
      }
      certificate "blog" {
        cert_file = "tls/blog.pem"
        key_file  = "tls/blog-key.pem"
      }
    }
    virtual_host "shop" {
      domains = ["shop.example.com"]
      route {
        service = "web"
      }
    }
    virtual_host "blog" {
      domains = ["blog.example.com"]
      tls {
        certificate = "blog"
      }
      route {
        service = "api"
      }
    }
  }
}
`

// servedTLS is what an Envoy would terminate TLS with, built from the
// listener and secrets the client received: the filter chain chosen by
// the client's SNI (exact server names, then the chain without any), and
// the certificate of the SDS secret that chain names.
func servedTLS(t *testing.T, st adsclient.State, listener string) *tls.Config {
	t.Helper()
	l := st.Listener(listener)
	if l == nil {
		t.Fatalf("no listener %q", listener)
	}
	chainFor := func(sni string) *listenerv3.FilterChain {
		var fallback *listenerv3.FilterChain
		for _, fc := range l.GetFilterChains() {
			names := fc.GetFilterChainMatch().GetServerNames()
			if len(names) == 0 {
				fallback = fc
			}
			if sni != "" && slices.Contains(names, sni) {
				return fc
			}
		}
		return fallback
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		fc := chainFor(hello.ServerName)
		if fc == nil {
			return nil, fmt.Errorf("no filter chain for %q", hello.ServerName)
		}
		ctx := &tlsv3.DownstreamTlsContext{}
		if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
			return nil, err
		}
		name := ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()[0].GetName()
		sec := st.Secret(name).GetTlsCertificate()
		if sec == nil {
			return nil, fmt.Errorf("secret %q not held", name)
		}
		cert, err := tls.X509KeyPair([]byte(sec.GetCertificateChain().GetInlineString()), []byte(sec.GetPrivateKey().GetInlineString()))
		if err != nil {
			return nil, fmt.Errorf("secret %q: %w", name, err)
		}
		return &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: ctx.GetCommonTlsContext().GetAlpnProtocols(), MinVersion: tls.VersionTLS12}, nil
	}
	return cfg
}

// handshake connects to a Go TLS server configured from what was served,
// verifying against the CA with serverName sent as SNI ("" sends none and
// verifies the name verifyAs), and returns the certificate the server
// presented and the protocol negotiated.
func handshake(t *testing.T, server *tls.Config, ca []byte, serverName, verifyAs string) (*x509.Certificate, string) {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		_ = c.(*tls.Conn).Handshake()
		_, _ = io.Copy(io.Discard, c)
		c.Close()
	}()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	client := &tls.Config{RootCAs: roots, ServerName: serverName, NextProtos: []string{"h2", "http/1.1"}}
	if serverName == "" {
		// No SNI: verify by hand, for the name the default certificate
		// must carry.
		client.InsecureSkipVerify = true
		client.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			leaf, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: verifyAs})
			return err
		}
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", lis.Addr().String(), client)
	if err != nil {
		t.Fatalf("TLS handshake (SNI %q): %v", serverName, err)
	}
	defer conn.Close()
	cs := conn.ConnectionState()
	return cs.PeerCertificates[0], cs.NegotiatedProtocol
}

func leafOf(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEdgeTLSOverSDS follows the edge TLS acceptance with a real Consul:
// a TLS listener and its certificates reach an Envoy-like client over
// SDS, and a Go TLS server built from what it received presents the
// files' certificates (by SNI) to a client that verifies them with the
// CA. Rewriting a certificate file pushes a new secret and no new
// listener; a missing file, a broken PEM, a key that does not match and
// an expired certificate each change nothing served and are reported on
// /v1/policy; private keys appear neither in logs nor in config dumps.
func TestEdgeTLSOverSDS(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	agent.RegisterTTL(t, "api", "api-1", 2001, nil, nil)

	ca := newEdgeCA(t)
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls")
	if err := os.Mkdir(tlsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writePair := func(name string, cert, key []byte) {
		t.Helper()
		replaceFile(t, filepath.Join(tlsDir, name+"-key.pem"), key, 0o600)
		replaceFile(t, filepath.Join(tlsDir, name+".pem"), cert, 0o644)
	}
	expires := time.Now().Add(12 * time.Hour)
	shopCert, shopKey := ca.issue("shop.example.com", expires)
	blogCert, blogKey := ca.issue("blog.example.com", expires)
	clientCert, clientKey := ca.issue("edge.client", expires)
	writePair("shop", shopCert, shopKey)
	writePair("blog", blogCert, blogKey)
	writePair("client", clientCert, clientKey)
	replaceFile(t, filepath.Join(tlsDir, "ca.pem"), ca.pem, 0o644)
	file := filepath.Join(dir, "policy.hcl")
	if err := os.WriteFile(file, []byte(tlsPolicy), 0o644); err != nil {
		t.Fatal(err)
	}

	logs := &syncbuffer.Buffer{}
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	h := startBridgeWith(t, agent, fwd, func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
		c.Logger = zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.DebugLevel)
	})
	edge := dialAs(t, h, adsclient.SotW, "edge", nil)
	edgeDelta := dialAs(t, h, adsclient.Delta, "edge", nil)
	other := dialAs(t, h, adsclient.SotW, "other", nil)

	wait := func(c *adsclient.Client, what string, pred func(adsclient.State) bool) adsclient.State {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		st, err := c.Wait(ctx, pred)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		return st
	}
	secrets := []string{"api/ca", "api/cert", "edge.https/cert/blog", "edge.https/cert/shop"}
	for _, c := range []*adsclient.Client{edge, edgeDelta} {
		wait(c, "TLS listener and its secrets", func(s adsclient.State) bool {
			return s.Listener("edge.https") != nil && slices.Equal(s.SecretNames(), secrets)
		})
	}
	// A node in no group (unmatched_nodes defaults to "none" once the
	// policy declares a proxy) gets nothing: no cluster, no secret.
	wait(other, "an empty answer", func(s adsclient.State) bool {
		return s.Version(adsclient.ClusterType) != "" && len(s.ClusterNames()) == 0
	})
	if names := other.Snapshot().SecretNames(); len(names) > 0 {
		t.Fatalf("a node in no group got secrets %v", names)
	}
	st := edge.Snapshot()

	// The handshake: what was served is the files' certificates, chosen
	// by SNI, and verifies with the CA.
	served := servedTLS(t, st, "edge.https")
	for _, tc := range []struct{ sni, verifyAs, want string }{
		{"shop.example.com", "", "shop.example.com"},
		{"blog.example.com", "", "blog.example.com"},
		{"", "shop.example.com", "shop.example.com"}, // no SNI: the default
	} {
		peer, proto := handshake(t, served, ca.pem, tc.sni, tc.verifyAs)
		want := map[string][]byte{"shop.example.com": shopCert, "blog.example.com": blogCert}[tc.want]
		if !peer.Equal(leafOf(t, want)) {
			t.Errorf("SNI %q: served %v, want the certificate of %s", tc.sni, peer.DNSNames, tc.want)
		}
		if proto != "h2" {
			t.Errorf("SNI %q: ALPN %q, want h2", tc.sni, proto)
		}
	}
	up := st.Secret("api/cert").GetTlsCertificate()
	if up.GetCertificateChain().GetInlineString() != string(clientCert) || up.GetPrivateKey().GetInlineString() != string(clientKey) {
		t.Error("upstream client certificate secret is not the files' contents")
	}
	if got := st.Secret("api/ca").GetValidationContext().GetTrustedCa().GetInlineString(); got != string(ca.pem) {
		t.Error("upstream CA secret is not the CA file")
	}

	// Rotation: a new certificate for shop is a new SDS version and no new
	// listener version, for SotW and delta clients alike.
	ldsVersion := st.Version(adsclient.ListenerType)
	ldsResponses := edge.Stats().Responses[adsclient.ListenerType]
	ldsDeltaResponses := edgeDelta.Stats().Responses[adsclient.ListenerType]
	cdsVersion := st.Version(adsclient.ClusterType)
	sdsVersion := st.Version(adsclient.SecretType)
	otherSDS := other.Snapshot().Version(adsclient.SecretType)
	newShopCert, newShopKey := ca.issue("shop.example.com", expires.Add(time.Hour))
	start := time.Now()
	writePair("shop", newShopCert, newShopKey)
	for _, c := range []*adsclient.Client{edge, edgeDelta} {
		wait(c, "rotated certificate", func(s adsclient.State) bool {
			return s.Secret("edge.https/cert/shop").GetTlsCertificate().GetCertificateChain().GetInlineString() == string(newShopCert)
		})
	}
	t.Logf("rotated certificate reached the proxies in %v", time.Since(start))
	st = edge.Snapshot()
	if st.Version(adsclient.SecretType) == sdsVersion {
		t.Error("SDS version unchanged after a rotation")
	}
	if v := st.Version(adsclient.ListenerType); v != ldsVersion {
		t.Errorf("listener version changed with a certificate: %s -> %s", ldsVersion, v)
	}
	if v := st.Version(adsclient.ClusterType); v != cdsVersion {
		t.Errorf("cluster version changed with a listener certificate: %s -> %s", cdsVersion, v)
	}
	time.Sleep(300 * time.Millisecond)
	if n := edge.Stats().Responses[adsclient.ListenerType]; n != ldsResponses {
		t.Errorf("SotW client got %d listener responses after a rotation, want none", n-ldsResponses)
	}
	if n := edgeDelta.Stats().Responses[adsclient.ListenerType]; n != ldsDeltaResponses {
		t.Errorf("delta client got %d listener responses after a rotation, want none", n-ldsDeltaResponses)
	}
	if v := other.Snapshot().Version(adsclient.SecretType); v != otherSDS {
		t.Error("a proxy outside the group got a new SDS version for the group's certificate")
	}
	if peer, _ := handshake(t, servedTLS(t, st, "edge.https"), ca.pem, "shop.example.com", ""); !peer.Equal(leafOf(t, newShopCert)) {
		t.Error("after rotation the served certificate is not the new file's")
	}

	// Bad input changes nothing served and is reported, at the attribute
	// that names the file.
	blogPath := filepath.Join(tlsDir, "blog.pem")
	_, strayKey := ca.issue("stray", expires)
	expiredCert, expiredKey := ca.issue("blog.example.com", time.Now().Add(-time.Minute))
	for _, bad := range []struct {
		name   string
		break_ func()
		want   string
	}{
		{"missing file", func() { _ = os.Remove(blogPath) }, "policy.hcl:20:21: Cannot read certificate file: " + blogPath + ": no such file or directory"},
		{"broken PEM", func() { replaceFile(t, blogPath, blogCert[:len(blogCert)/2], 0o644) }, "policy.hcl:20:21: Invalid PEM: " + blogPath + " holds no PEM certificate"},
		{"mismatched key", func() { replaceFile(t, filepath.Join(tlsDir, "blog-key.pem"), strayKey, 0o600) }, "policy.hcl:21:21: Key does not match certificate"},
		{"expired certificate", func() { writePair("blog", expiredCert, expiredKey) }, `policy.hcl:20:21: Expired certificate: ` + blogPath + `: the certificate for "blog.example.com" expired at`},
	} {
		// Start each case from the good files.
		writePair("blog", blogCert, blogKey)
		deadline := time.Now().Add(10 * time.Second)
		for policyStatus(t, h).LastError != nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s: good files not accepted again: %v", bad.name, policyStatus(t, h).LastError)
			}
			time.Sleep(50 * time.Millisecond)
		}
		before := edge.Snapshot()
		sdsResponses := edge.Stats().Responses[adsclient.SecretType]
		failures := policyStatus(t, h).FailedReloads + 1
		bad.break_()
		deadline = time.Now().Add(10 * time.Second)
		var ps bridge.PolicyStatus
		for {
			ps = policyStatus(t, h)
			if ps.FailedReloads >= failures && ps.LastError != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not reported on /v1/policy: %+v", bad.name, ps)
			}
			time.Sleep(50 * time.Millisecond)
		}
		diags := strings.Join(ps.LastError.Diagnostics, "\n")
		if !strings.Contains(diags, file[:len(file)-len("policy.hcl")]+bad.want) {
			t.Errorf("%s: diagnostics\n%s\nwant\n%s", bad.name, diags, bad.want)
		}
		time.Sleep(300 * time.Millisecond)
		after := edge.Snapshot()
		for _, typ := range []string{adsclient.ListenerType, adsclient.SecretType, adsclient.ClusterType} {
			if before.Version(typ) != after.Version(typ) {
				t.Errorf("%s: %s version changed: %s -> %s", bad.name, typ, before.Version(typ), after.Version(typ))
			}
		}
		if n := edge.Stats().Responses[adsclient.SecretType]; n != sdsResponses {
			t.Errorf("%s: %d new SDS responses", bad.name, n-sdsResponses)
		}
		if got := after.Secret("edge.https/cert/blog").GetTlsCertificate().GetCertificateChain().GetInlineString(); got != string(blogCert) {
			t.Errorf("%s: the last good blog certificate is no longer served", bad.name)
		}
	}
	// Fixed again: accepted, and nothing to push (same contents).
	writePair("blog", blogCert, blogKey)
	deadline := time.Now().Add(10 * time.Second)
	for policyStatus(t, h).LastError != nil {
		if time.Now().After(deadline) {
			t.Fatal("fixed files not accepted")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ps := policyStatus(t, h)
	var certSources []string
	for _, s := range ps.Sources {
		if s.Kind == "certificate" {
			certSources = append(certSources, filepath.Base(s.Name))
		}
	}
	if slices.Sort(certSources); !slices.Equal(certSources, []string{"blog.pem", "ca.pem", "client.pem", "shop.pem"}) {
		t.Errorf("/v1/policy certificate sources = %v", certSources)
	}

	// Private keys: redacted in the config dump, absent from the logs.
	code, dump := get(t, "http://"+h.daemon.AdminAddr().String()+"/v1/config_dump?node=test-sotw-edge")
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(dump)); err == nil {
		dump = compact.String()
	}
	if code != 200 || !strings.Contains(dump, `"private_key":{"inline_string":"[redacted]"}`) || !strings.Contains(dump, "edge.https/cert/shop") {
		t.Errorf("/v1/config_dump = %d: %.400s", code, dump)
	}
	logText := logs.String()
	for _, k := range append([][]byte{strayKey, expiredKey}, shopKey, newShopKey, blogKey, clientKey) {
		for _, line := range strings.Split(string(k), "\n")[1:3] {
			if strings.Contains(dump, line) {
				t.Errorf("config dump contains a private key line %q", line)
			}
			if strings.Contains(logText, line) {
				t.Errorf("logs contain a private key line %q", line)
			}
		}
	}
	if !strings.Contains(logText, "policy rejected") {
		t.Error("rejected reloads were not logged")
	}
}
