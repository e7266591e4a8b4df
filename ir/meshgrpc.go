package ir

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// The proxyless gRPC mesh: gRPC servers using grpc-go's xDS server
// support (xds.NewGRPCServer with xDS credentials) are mesh destinations
// without a sidecar. They are Consul Connect-native services
// (connect { native = true }); each instance asks LDS for its inbound
// listener by its listening address (gRFC A36) and gets mutual TLS with
// gRPC certificate provider instances (gRFC A29; the per-VM agent writes
// the files they read) and the HTTP RBAC filter built from the service's
// intentions (gRFC A41). gRPC clients reach them through the mesh gRPC
// cluster of the service (MeshGRPCClusterName): mutual TLS with the same
// provider instance, verifying the server's SPIFFE id.

// MeshGRPCServer is one instance of a proxyless gRPC server in the mesh.
type MeshGRPCServer struct {
	// Service is the Consul service (its SPIFFE id names it).
	Service    string
	Datacenter string
	// Address and Port are where the instance listens, as grpc-go's xDS
	// server names its listener (GRPCServerListenerName): the address it
	// binds, which must be what Consul's registration says.
	Address netip.Addr
	Port    uint32
	// Intentions decide who may call Service, as for a sidecar.
	Intentions Intentions
}

// MeshGRPCCertProvider is the gRPC bootstrap's certificate provider
// instance the mesh's gRPC listeners and clusters name: the service's
// Connect leaf and key, and the Connect CA roots, from the files the
// per-VM agent writes (`bootstrap -grpc -mesh-cert-dir` declares it).
const MeshGRPCCertProvider = "consul-connect"

// GRPCServerListenerNamePrefix + HOST:PORT is the listener grpc-go's xDS
// server asks for with the bootstrap's
// server_listener_resource_name_template that `bootstrap -grpc
// -mesh-cert-dir` writes.
const GRPCServerListenerNamePrefix = "grpc/server?xds.resource.listening_address="

// ListenerName is the LDS name the server instance asks for.
func (s *MeshGRPCServer) ListenerName() string {
	return GRPCServerListenerNamePrefix + netip.AddrPortFrom(s.Address, uint16(s.Port)).String()
}

// MeshGRPCClusterPrefix starts the name of every mesh gRPC cluster. A
// Consul service name cannot hold ':', so no service cluster or subset
// cluster can take such a name.
const MeshGRPCClusterPrefix = "mesh-grpc:"

// MeshGRPCClusterName is the cluster proxyless gRPC clients reach service
// through in the mesh. It is not the Envoy sidecars' mesh cluster
// (MeshClusterName): that one's endpoints are the service's sidecars and
// its TLS names SDS secrets, which gRPC's xDS client cannot fetch (it
// NACKs tls_certificate_sds_secret_configs); this one's endpoints are the
// Connect-native instances themselves and its TLS names the bootstrap's
// certificate provider instance.
func MeshGRPCClusterName(service, datacenter, trustDomain string) string {
	return MeshGRPCClusterPrefix + MeshClusterName(service, datacenter, trustDomain)
}

// GRPCOnly reports whether only proxyless gRPC clients can take c: its
// TLS names a gRPC certificate provider instance, which an Envoy does not
// have (it would reject the cluster, and with it the whole CDS update).
// A proxyless clients' copy of a cluster (IsProxylessCopy) is theirs
// alone too.
func (c *Cluster) GRPCOnly() bool {
	return (c.TLS != nil && c.TLS.CertificateProvider != "") || IsProxylessCopy(c.Name)
}

// validateMeshGRPC checks the mesh's gRPC servers: sorted by listener
// name, unique, with a trust domain to name their callers by.
func (m *Model) validateMeshGRPC() []error {
	var errs []error
	if len(m.MeshGRPCServers) > 0 && (m.Mesh == nil || m.Mesh.TrustDomain == "") {
		errs = append(errs, fmt.Errorf("mesh gRPC servers without a mesh trust domain: %w", ErrListener))
	}
	for _, c := range m.Clusters {
		if t := c.TLS; t != nil && t.CertificateProvider != "" && (t.CertificateSecret != "" || t.CASecret != "") {
			errs = append(errs, fmt.Errorf("cluster %q: TLS from a certificate provider and from SDS secrets at once: %w", c.Name, ErrSecret))
		}
	}
	for _, g := range m.Groups {
		if g.Proxyless {
			continue
		}
		for _, n := range g.Clusters {
			if c := m.Cluster(n); c != nil && c.GRPCOnly() {
				errs = append(errs, fmt.Errorf("group %q gets cluster %q, which only proxyless gRPC can take: %w", g.Name, n, ErrUnknownCluster))
			}
		}
	}
	for i := range m.MeshGRPCServers {
		s := &m.MeshGRPCServers[i]
		if !s.Address.IsValid() || s.Port == 0 || s.Port > 65535 || s.Service == "" || s.Datacenter == "" {
			errs = append(errs, fmt.Errorf("mesh gRPC server %q at %s:%d: needs a service, a datacenter, an address and a port: %w", s.Service, s.Address, s.Port, ErrListener))
		}
		if i > 0 {
			switch prev := m.MeshGRPCServers[i-1].ListenerName(); strings.Compare(prev, s.ListenerName()) {
			case 0:
				errs = append(errs, fmt.Errorf("mesh gRPC server listener %q: %w", s.ListenerName(), ErrDuplicate))
			case 1:
				errs = append(errs, fmt.Errorf("mesh gRPC server listener %q after %q: %w", s.ListenerName(), prev, ErrUnsorted))
			}
		}
		if !slices.ContainsFunc([]IntentionAction{"", IntentionAllow, IntentionDeny}, func(a IntentionAction) bool { return a == s.Intentions.Default }) {
			errs = append(errs, fmt.Errorf("mesh gRPC server %q: default intention %q: %w", s.Service, s.Intentions.Default, ErrListener))
		}
	}
	return errs
}
