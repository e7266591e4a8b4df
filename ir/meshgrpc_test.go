package ir

import (
	"errors"
	"net/netip"
	"testing"
)

// TestMeshGRPCServerListenerName: the name grpc-go's xDS server asks
// for is the template with net.JoinHostPort of the address it listens
// on ("[::1]:8443" for IPv6).
func TestMeshGRPCServerListenerName(t *testing.T) {
	for addr, want := range map[string]string{
		"10.0.0.5": "grpc/server?xds.resource.listening_address=10.0.0.5:8443",
		"::1":      "grpc/server?xds.resource.listening_address=[::1]:8443",
	} {
		s := MeshGRPCServer{Address: netip.MustParseAddr(addr), Port: 8443}
		if got := s.ListenerName(); got != want {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
	}
}

func TestMeshGRPCValidate(t *testing.T) {
	a := MeshGRPCServer{Service: "echo", Datacenter: "dc1", Address: netip.MustParseAddr("10.0.0.1"), Port: 1, Intentions: Intentions{Default: IntentionDeny}}
	b := a
	b.Address = netip.MustParseAddr("10.0.0.2")
	for name, tc := range map[string]struct {
		m    Model
		want error
	}{
		"ok":                  {Model{Mesh: &Mesh{TrustDomain: "td"}, MeshGRPCServers: []MeshGRPCServer{a, b}}, nil},
		"no trust domain":     {Model{MeshGRPCServers: []MeshGRPCServer{a}}, ErrListener},
		"unsorted":            {Model{Mesh: &Mesh{TrustDomain: "td"}, MeshGRPCServers: []MeshGRPCServer{b, a}}, ErrUnsorted},
		"duplicate":           {Model{Mesh: &Mesh{TrustDomain: "td"}, MeshGRPCServers: []MeshGRPCServer{a, a}}, ErrDuplicate},
		"provider and secret": {Model{Clusters: []*Cluster{{Name: "c", ConnectTimeout: 1, TLS: &UpstreamTLS{CertificateProvider: "p", CASecret: "s"}}}, Secrets: []Secret{{Name: "s", TrustedCA: []byte("x")}}}, ErrSecret},
		"Envoy group gets a gRPC-only cluster": {Model{
			Clusters: []*Cluster{{Name: "c", ConnectTimeout: 1, TLS: &UpstreamTLS{CertificateProvider: "p"}}},
			Groups:   []Group{{Name: "edge", Clusters: []string{"c"}}},
		}, ErrUnknownCluster},
	} {
		err := tc.m.Validate()
		if (tc.want == nil) != (err == nil) || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}
