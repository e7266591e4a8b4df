package ir

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Gateways (Consul's terminating and mesh gateways) are proxy groups of
// their own, like sidecars: named SidecarGroupName(node, gateway service
// id), so an Envoy is keyed to its gateway by its node id, as Consul keys
// it. Their one listener is derived by the translator from
// Group.Gateway: a TLS inspector and one filter chain per service,
// matched by the server name (SNI) the mesh's clients send.

// Gateway kinds, as Consul names them.
const (
	GatewayTerminating = "terminating-gateway"
	GatewayMesh        = "mesh-gateway"
)

// Gateway is one registered gateway instance.
type Gateway struct {
	// Kind is GatewayTerminating or GatewayMesh.
	Kind string
	// ProxyID is the gateway's Consul service id (its Envoy's node id),
	// Node its Consul node, Service its service name.
	ProxyID, Node, Service string
	Datacenter             string
	// Address and Port are the listener's: the registration's own
	// address ("" binds 0.0.0.0) and port, as Consul's default bind.
	Address string
	Port    uint32
	// Chains are the listener's filter chains, sorted by SNI (as Consul
	// sorts them, so an unchanged gateway keeps its listener).
	Chains []GatewayChain
}

// GatewayChain is one filter chain of a gateway's listener.
type GatewayChain struct {
	// SNI is the server name the chain matches: the mesh name of Service
	// (MeshClusterName), which mesh clients send.
	SNI string
	// Service is the service behind the chain; Cluster the cluster (in
	// Model.Clusters and the group's Clusters) it forwards to.
	Service, Cluster string
	// Datacenter is set, and Service empty, on a mesh gateway's chain of
	// another datacenter: SNI is then "*.DC.internal.TRUST-DOMAIN" and
	// Cluster that datacenter's mesh gateways (GatewayClusterName).
	Datacenter string `json:",omitempty"`
	// Terminating gateways only: the chain terminates the mesh's mutual
	// TLS with Service's leaf (CertificateSecret, LeafSecretPrefix +
	// Service) against the Connect roots, and enforces Service's
	// Intentions (HTTP RBAC when Protocol is HTTP-like, else network
	// RBAC), as Service's own sidecar would. A mesh gateway's chains pass
	// TLS through untouched.
	Protocol          string     `json:",omitempty"`
	Intentions        Intentions `json:",omitempty"`
	CertificateSecret string     `json:",omitempty"`
}

// GatewayListenerName is the name of a gateway group's listener.
func GatewayListenerName(group string) string { return group + ".gateway" }

// ClusterRefs lists the clusters the gateway forwards to, sorted.
func (g *Gateway) ClusterRefs() []string {
	var out []string
	for _, c := range g.Chains {
		out = append(out, c.Cluster)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ErrGateway marks an invalid gateway.
var ErrGateway = errors.New("invalid gateway")

// validateGateways checks what the translator needs of each gateway: a
// port, sorted unique SNIs, and for a terminating gateway a certificate
// and a known protocol per chain (without them a chain would accept
// callers it cannot identify, and the RBAC would see no principal).
func (m *Model) validateGateways() []error {
	var errs []error
	for _, c := range m.Clusters {
		// TLS from files: a CA (else the peer is not verified), a
		// certificate only with its key, and no SDS secret besides (one
		// or the other says what Envoy presents and trusts).
		if f := c.TLS.files(); f != nil && (f.CA == "" || (f.Cert == "") != (f.Key == "") || c.TLS.CertificateSecret != "" || c.TLS.CASecret != "") {
			errs = append(errs, fmt.Errorf("cluster %q: TLS files %+v must name a CA, a certificate with its key, and no SDS secret besides: %w", c.Name, *f, ErrSecret))
		}
	}
	for gi := range m.Groups {
		g := &m.Groups[gi]
		gw := g.Gateway
		if gw == nil {
			continue
		}
		at := fmt.Sprintf("gateway group %q", g.Name)
		if g.Sidecar != nil || g.Proxyless || len(g.Listeners) > 0 {
			errs = append(errs, fmt.Errorf("%s: a gateway group has no other listeners: %w", at, ErrGateway))
		}
		if gw.Kind != GatewayTerminating && gw.Kind != GatewayMesh {
			errs = append(errs, fmt.Errorf("%s: kind %q: %w", at, gw.Kind, ErrGateway))
		}
		if gw.Port == 0 || gw.Port > 65535 {
			errs = append(errs, fmt.Errorf("%s: port %d: %w", at, gw.Port, ErrGateway))
		}
		if !slices.IsSortedFunc(gw.Chains, func(a, b GatewayChain) int { return strings.Compare(a.SNI, b.SNI) }) {
			errs = append(errs, fmt.Errorf("%s chains: %w", at, ErrUnsorted))
		}
		for i, c := range gw.Chains {
			cat := fmt.Sprintf("%s chain %q", at, c.SNI)
			switch {
			case c.SNI == "" || c.Cluster == "":
				errs = append(errs, fmt.Errorf("%s: no SNI or cluster: %w", cat, ErrGateway))
			case i > 0 && gw.Chains[i-1].SNI == c.SNI:
				errs = append(errs, fmt.Errorf("%s: %w", cat, ErrDuplicate))
			case gw.Kind == GatewayTerminating && c.CertificateSecret == "":
				errs = append(errs, fmt.Errorf("%s: no certificate: %w", cat, ErrGateway))
			case gw.Kind == GatewayTerminating && c.Protocol != "tcp" && !HTTPProtocol(c.Protocol):
				errs = append(errs, fmt.Errorf("%s: protocol %q: %w", cat, c.Protocol, ErrGateway))
			}
		}
	}
	return errs
}

// gatewayClusters are the clusters only gateways may get: what a
// terminating gateway dials originates TLS with files on the gateway's
// host, and a mesh gateway's clusters reach sidecars with the caller's
// own TLS, so neither means anything to another proxy.
func (m *Model) gatewayClusters(out map[string]bool) {
	for _, g := range m.Groups {
		if g.Gateway != nil {
			for _, c := range g.Gateway.ClusterRefs() {
				out[c] = true
			}
		}
	}
}

func (t *UpstreamTLS) files() *TLSFiles {
	if t == nil {
		return nil
	}
	return t.Files
}

// gatewayTargets are the gateway's clusters as TCP targets, for the
// reach check.
func gatewayTargets(g *Gateway) []WeightedCluster {
	var out []WeightedCluster
	for _, c := range g.ClusterRefs() {
		out = append(out, WeightedCluster{Name: c, Weight: 1})
	}
	return out
}

// GatewayClusterName is the name of the cluster of datacenter dc's mesh
// gateways, as Consul names it (connect.GatewaySNI): a mesh gateway
// forwards "*." + that name to them.
func GatewayClusterName(dc, trustDomain string) string {
	return dc + ".internal." + trustDomain
}
