package agent_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/hashicorp/consul/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
)

// TestAgentServesLocalConnectCertificates: the agent serves the local
// service's Connect leaf and the CA roots from the local Consul agent over
// SDS; a CA rotation pushes new versions of both; the private key is in
// no log line and no admin output.
func TestAgentServesLocalConnectCertificates(t *testing.T) {
	ca := consultest.Start(t)
	ca.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	cen := startCentral(t, ca.HTTPAddr(), freeAddr(t))
	var logs syncbuffer.Buffer
	ag := startAgentWith(t, t.TempDir(), func(c *agent.Config) {
		c.Upstreams = []string{cen.addr}
		c.ConsulAddress = ca.HTTPAddr()
		c.ConnectServices = []string{"web"}
		c.Leaf = map[string]agent.LeafAccess{"web": {ProxyGroups: []string{"web"}}}
	}, &logs)

	conn, err := grpc.NewClient("unix://"+ag.SocketAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sds, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sds.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "envoy-web", Cluster: "web"}, TypeUrl: resourcev3.SecretType,
		ResourceNamesSubscribe: []string{agent.LeafSecretPrefix + "web", agent.RootsSecretName}}); err != nil {
		t.Fatal(err)
	}
	held := map[string]*tlsv3.Secret{}
	versions := map[string]string{}
	recv := func(what string, done func() bool) {
		t.Helper()
		for !done() {
			resp, err := sds.Recv()
			if err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
			for _, r := range resp.GetResources() {
				s := &tlsv3.Secret{}
				if err := r.GetResource().UnmarshalTo(s); err != nil {
					t.Fatal(err)
				}
				held[r.GetName()], versions[r.GetName()] = s, r.GetVersion()
			}
			if err := sds.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.SecretType, ResponseNonce: resp.GetNonce()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	leafName := agent.LeafSecretPrefix + "web"
	recv("the leaf and the roots", func() bool { return held[leafName] != nil && held[agent.RootsSecretName] != nil })
	leaf := held[leafName].GetTlsCertificate()
	cert := parseCert(t, leaf.GetCertificateChain().GetInlineString())
	if len(cert.URIs) != 1 || !strings.HasSuffix(cert.URIs[0].String(), "/svc/web") {
		t.Fatalf("leaf URIs = %v, want the SPIFFE id of service web", cert.URIs)
	}
	key := leaf.GetPrivateKey().GetInlineString()
	if !strings.Contains(key, "PRIVATE KEY") {
		t.Fatal("the leaf secret carries no private key")
	}
	roots := held[agent.RootsSecretName].GetValidationContext().GetTrustedCa().GetInlineString()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(roots))
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("the leaf does not verify against the served roots: %v", err)
	}

	// Rotate the CA: a new root key.
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalECPrivateKey(k)
	pk := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	if _, err := ca.Client().Connect().CASetConfig(&api.CAConfig{Provider: "consul", Config: map[string]any{"PrivateKey": pk}}, nil); err != nil {
		t.Fatal(err)
	}
	oldLeaf, oldRoots := versions[leafName], versions[agent.RootsSecretName]
	recv("new secrets after the CA rotation", func() bool {
		return versions[leafName] != oldLeaf && versions[agent.RootsSecretName] != oldRoots
	})
	if got := held[agent.RootsSecretName].GetValidationContext().GetTrustedCa().GetInlineString(); strings.Count(got, "BEGIN CERTIFICATE") < 2 {
		t.Errorf("roots after rotation hold %d certificates, want old and new", strings.Count(got, "BEGIN CERTIFICATE"))
	}

	// No key in the logs or the admin output.
	newKey := held[leafName].GetTlsCertificate().GetPrivateKey().GetInlineString()
	for _, k := range []string{key, newKey} {
		body := pemBody(k)
		if strings.Contains(logs.String(), body) {
			t.Fatal("a private key appears in the agent's log")
		}
		for _, path := range []string{"/readyz", "/v1/proxies", "/metrics", "/healthz"} {
			resp, err := http.Get("http://" + ag.AdminAddr().String() + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), body) {
				t.Fatalf("a private key appears in %s", path)
			}
		}
	}
}

func parseCert(t *testing.T, p string) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode([]byte(p))
	if b == nil {
		t.Fatalf("no PEM certificate in %q", p)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pemBody is a line from the middle of a PEM block, enough to spot it.
func pemBody(p string) string {
	lines := strings.Split(strings.TrimSpace(p), "\n")
	return lines[len(lines)/2]
}
