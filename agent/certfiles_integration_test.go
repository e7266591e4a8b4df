package agent_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
)

// TestAgentWritesConnectCertificateFiles: with connect.cert_dir the agent
// writes the service's leaf, key and the roots as files grpc-go's
// file_watcher reads (0600 in a 0700 directory), the leaf carries the
// service's SPIFFE id and pairs with the key, and a CA rotation replaces
// all three; no key is logged.
func TestAgentWritesConnectCertificateFiles(t *testing.T) {
	ca := consultest.Start(t)
	ca.RegisterTTL(t, "echo", "echo-1", 1001, nil, nil)
	dir := t.TempDir()
	certDir := filepath.Join(dir, "certs")
	var logs syncbuffer.Buffer
	startAgentWith(t, dir, func(c *agent.Config) {
		c.ConsulAddress = ca.HTTPAddr()
		c.ConnectServices = []string{"echo"}
		c.CertDir = certDir
	}, &logs)

	svcDir := filepath.Join(certDir, "echo")
	files := func() (cert, key, roots string, ok bool) {
		b := map[string]string{}
		for _, n := range []string{agent.CertFileName, agent.KeyFileName, agent.RootsFileName} {
			data, err := os.ReadFile(filepath.Join(svcDir, n))
			if err != nil {
				return "", "", "", false
			}
			b[n] = string(data)
		}
		return b[agent.CertFileName], b[agent.KeyFileName], b[agent.RootsFileName], true
	}
	var cert, key, roots string
	waitFor(t, 30*time.Second, "the certificate files", func() bool {
		var ok bool
		cert, key, roots, ok = files()
		return ok
	})
	for _, n := range []string{agent.CertFileName, agent.KeyFileName, agent.RootsFileName} {
		st, err := os.Stat(filepath.Join(svcDir, n))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", n, st.Mode().Perm())
		}
	}
	if st, err := os.Stat(svcDir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("the service's directory: %v, mode %v, want 0700", err, st.Mode().Perm())
	}
	leaf := parseCert(t, cert)
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://"+trustDomain(t, ca)+"/ns/default/dc/dc1/svc/echo" {
		t.Fatalf("leaf URIs = %v, want echo's SPIFFE id", leaf.URIs)
	}
	if _, err := tls.X509KeyPair([]byte(cert), []byte(key)); err != nil {
		t.Fatalf("cert.pem and key.pem do not pair: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(roots))
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("the leaf does not verify against roots.pem: %v", err)
	}

	// Rotate the CA: Consul issues a new leaf, the roots gain the new root.
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalECPrivateKey(k)
	pk := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	if _, err := ca.Client().Connect().CASetConfig(&api.CAConfig{Provider: "consul", Config: map[string]any{"PrivateKey": pk}}, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, 30*time.Second, "new certificate files after the CA rotation", func() bool {
		c, k, r, ok := files()
		if !ok || c == cert || k == key || r == roots {
			return false
		}
		_, err := tls.X509KeyPair([]byte(c), []byte(k)) // the pair may be half-written between two renames
		return err == nil
	})
	t.Logf("files rewritten %v after the CA rotation", time.Since(start).Round(time.Millisecond))
	newCert, newKey, newRoots, _ := files()
	if strings.Count(newRoots, "BEGIN CERTIFICATE") < 2 {
		t.Errorf("roots.pem after the rotation holds %d certificates, want old and new", strings.Count(newRoots, "BEGIN CERTIFICATE"))
	}
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(newRoots))
	if _, err := parseCert(t, newCert).Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("the new leaf does not verify against the new roots.pem: %v", err)
	}
	ents, _ := os.ReadDir(svcDir)
	if len(ents) != 3 {
		t.Errorf("the service's directory holds %d entries, want the 3 files (no temporary left over)", len(ents))
	}
	for _, k := range []string{key, newKey} {
		if strings.Contains(logs.String(), pemBody(k)) {
			t.Fatal("a private key appears in the agent's log")
		}
	}
}

func trustDomain(t *testing.T, ca *consultest.Agent) string {
	t.Helper()
	roots, _, err := ca.Client().Agent().ConnectCARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	return roots.TrustDomain
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
