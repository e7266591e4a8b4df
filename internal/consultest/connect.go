package consultest

import (
	"crypto/x509"
	"encoding/pem"
	"testing"

	"github.com/hashicorp/consul/api"
)

// RegisterWebAPIMesh registers, through the agent as an operator would,
// web (port 8080) and api (9090), each with a Connect sidecar; web's
// sidecar has the upstream api on local_bind_port 9191.
func (a *Agent) RegisterWebAPIMesh(t testing.TB) {
	t.Helper()
	for _, reg := range []*api.AgentServiceRegistration{
		{Name: "web", Port: 8080, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Proxy: &api.AgentServiceConnectProxyConfig{Upstreams: []api.Upstream{{DestinationName: "api", LocalBindPort: 9191}}}}}},
		{Name: "api", Port: 9090, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}},
	} {
		if err := a.client.Agent().ServiceRegister(reg); err != nil {
			t.Fatalf("consultest: register %s: %v", reg.Name, err)
		}
	}
}

// VerifyConnectLeaf checks a Connect leaf certificate chain (PEM, leaf
// first): it carries exactly the SPIFFE id uri and chains to one of
// Consul's roots.
func VerifyConnectLeaf(t testing.TB, chainPEM []byte, roots *api.CARootList, uri string) {
	t.Helper()
	block, rest := pem.Decode(chainPEM)
	if block == nil {
		t.Fatal("consultest: the leaf is not PEM")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != uri {
		t.Errorf("leaf URIs %v, want %s", leaf.URIs, uri)
	}
	pool, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, r := range roots.Roots {
		pool.AppendCertsFromPEM([]byte(r.RootCertPEM))
	}
	inter.AppendCertsFromPEM(rest)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("leaf does not chain to Consul's root: %v", err)
	}
}
