package ir

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// A sidecar's listeners are ordinary listeners of its group, derived from
// the registration (Sidecar.Listeners), so the reach check, the
// translator's listener builders and config dumps treat them like any
// other; only the public listener's RBAC (from Sidecar.Intentions) is
// added by the translator.

// PublicListenerName is the name of a sidecar group's public (inbound)
// listener.
func PublicListenerName(group string) string { return group + ".public" }

// UpstreamListenerName is the name of the outbound listener of upstream u
// of a sidecar group: GROUP.upstream.SERVICE, with ".DATACENTER" for an
// upstream in another datacenter.
func UpstreamListenerName(group string, u *MeshUpstream) string {
	n := group + ".upstream." + u.Service
	if u.Datacenter != "" {
		n += "." + u.Datacenter
	}
	return n
}

// IsMeshSecret reports whether name is one of the mesh's SDS secrets (a
// Connect leaf or the roots), which the per-VM agent serves unless the
// mesh is central.
func IsMeshSecret(name string) bool {
	return strings.HasPrefix(name, LeafSecretPrefix) || name == RootsSecretName
}

// SidecarClusters names the clusters that serve Connect sidecars alone:
// mesh clusters (their TLS presents a Connect leaf) and every sidecar's
// local application. A node in no group never gets one: it holds no
// leaf, so a mesh cluster would only warm until timing out, and a local
// application is one VM's business.
func (m *Model) SidecarClusters() map[string]bool {
	out := map[string]bool{}
	for _, g := range m.Groups {
		if g.Sidecar != nil && g.Sidecar.LocalCluster != "" {
			out[g.Sidecar.LocalCluster] = true
		}
	}
	for _, c := range m.Clusters {
		// An aggregate cluster is only ever a mesh failover's.
		if c.TLS != nil && strings.HasPrefix(c.TLS.CertificateSecret, LeafSecretPrefix) || c.OriginalDestination || len(c.Aggregate) > 0 {
			out[c.Name] = true
		}
	}
	m.gatewayClusters(out)
	return out
}

// MeshSecretsExternal reports whether the mesh's secrets are served by
// someone other than the bridge (the per-VM agent, from its local Consul
// agent: keys stay on the VM), so listeners and clusters may name them
// without the model holding them.
func (m *Model) MeshSecretsExternal() bool { return m.Mesh == nil || !m.Mesh.Central }

// HTTPProtocol reports whether a mesh protocol is HTTP-aware (an HTTP
// connection manager, HTTP RBAC), as Consul's IsProtocolHTTPLike.
func HTTPProtocol(p string) bool { return p == "http" || p == "http2" || p == "grpc" }

// meshALPN is what a sidecar's public listener offers, as Consul's.
func meshALPN(protocol string) []string {
	switch protocol {
	case "http2", "grpc":
		return []string{"h2", "http/1.1"}
	case "http":
		return []string{"http/1.1"}
	}
	return nil
}

// Listeners are the sidecar's listeners in group: the public one, then
// one per upstream with a bind port in the order of Upstreams (implicit
// upstreams are filter chains of the transparent outbound listener:
// OutboundChains).
func (s *Sidecar) Listeners(group string) []Listener {
	out := []Listener{s.publicListener(group)}
	for i := range s.Upstreams {
		if !s.Upstreams[i].Implicit() {
			out = append(out, s.Upstreams[i].listener(group))
		}
	}
	return out
}

func (s *Sidecar) publicListener(group string) Listener {
	l := Listener{
		Name:    PublicListenerName(group),
		Address: cmp.Or(s.Address, "0.0.0.0"),
		Port:    s.Port,
		// Terminates mutual TLS: the destination's leaf, and callers'
		// certificates must chain to the Connect roots. Who may call is
		// the RBAC's business (Intentions).
		TLS: &DownstreamTLS{
			DefaultCertificate: LeafSecretPrefix + s.Service,
			ClientCASecret:     RootsSecretName,
			ALPN:               meshALPN(s.Protocol),
		},
	}
	target := []WeightedCluster{{Name: s.LocalCluster, Weight: 1}}
	if !HTTPProtocol(s.Protocol) {
		l.Protocol, l.TCP = "tcp", target
		return l
	}
	l.Protocol = "http"
	l.VirtualHosts = []VirtualHost{{Name: "local", Domains: []string{"*"}, Routes: []Route{{
		Name: "local/0", Source: "sidecar " + s.ProxyID, Clusters: target,
	}}}}
	return l
}

func (u *MeshUpstream) listener(group string) Listener {
	l := Listener{
		Name:    UpstreamListenerName(group, u),
		Address: cmp.Or(u.BindAddress, "127.0.0.1"),
		Port:    u.BindPort,
	}
	if !HTTPProtocol(u.Protocol) {
		l.Protocol, l.TCP = "tcp", []WeightedCluster{{Name: u.Cluster, Weight: 1}}
		return l
	}
	l.Protocol = "http"
	routes := u.Routes
	if routes == nil {
		routes = []Route{{Name: u.Service + "/0", Source: "upstream " + u.Service, Clusters: []WeightedCluster{{Name: u.Cluster, Weight: 1}}}}
	}
	for _, r := range routes {
		l.UsesFault = l.UsesFault || r.Fault != nil
	}
	l.VirtualHosts = []VirtualHost{{Name: u.Service, Domains: []string{"*"}, Routes: routes}}
	return l
}

// ErrSidecar marks an invalid sidecar.
var ErrSidecar = errors.New("invalid sidecar")

// validateMesh checks the sidecar groups: what the translator needs of
// each registration and unique listener names. That a central mesh's
// group gets the mesh secrets its listeners and clusters name is checked
// by the translator, per group: a leaf not yet signed fails its sidecar's
// group only, which keeps what it had, not the whole model.
func (m *Model) validateMesh() []error {
	var errs []error
	for _, s := range m.Secrets {
		if strings.HasPrefix(s.Name, LeafSecretPrefix) {
			// Shared secrets go to every group reaching a cluster that
			// names them: a leaf's key must go to its service's sidecars
			// only (their group's Secrets).
			errs = append(errs, fmt.Errorf("shared secret %q is a Connect leaf; leaves are group secrets of their service's sidecars: %w", s.Name, ErrSidecar))
		}
	}
	for _, c := range m.Clusters {
		// (A gRPC certificate provider brings its CA: meshgrpc.go.)
		if c.TLS != nil && len(c.TLS.MatchURISANs) > 0 && c.TLS.CASecret == "" && c.TLS.CertificateProvider == "" {
			// The SAN is checked on a chain the CA verified; without a CA
			// anyone can present any SAN.
			errs = append(errs, fmt.Errorf("cluster %q checks URI SANs %q but trusts no CA: %w", c.Name, c.TLS.MatchURISANs, ErrSecret))
		}
	}
	for gi := range m.Groups {
		g := &m.Groups[gi]
		if g.Sidecar == nil {
			continue
		}
		s := g.Sidecar
		at := fmt.Sprintf("sidecar group %q", g.Name)
		if g.Proxyless {
			errs = append(errs, fmt.Errorf("%s is proxyless: %w", at, ErrSidecar))
		}
		if s.Service == "" || strings.Contains(s.Service, "*") {
			errs = append(errs, fmt.Errorf("%s: destination service %q: %w", at, s.Service, ErrSidecar))
		}
		if s.Port == 0 || s.Port > 65535 {
			errs = append(errs, fmt.Errorf("%s: public port %d: %w", at, s.Port, ErrSidecar))
		}
		if s.LocalCluster == "" {
			errs = append(errs, fmt.Errorf("%s: no local cluster: %w", at, ErrSidecar))
		}
		if s.Protocol != "tcp" && !HTTPProtocol(s.Protocol) {
			errs = append(errs, fmt.Errorf("%s: protocol %q: must be tcp, http, http2 or grpc: %w", at, s.Protocol, ErrSidecar))
		}
		for i := range s.Upstreams {
			u := &s.Upstreams[i]
			uat := fmt.Sprintf("%s upstream %q", at, u.Service)
			switch {
			case u.Service == "":
				errs = append(errs, fmt.Errorf("%s %d: no service: %w", at, i, ErrSidecar))
			case u.Cluster == "":
				errs = append(errs, fmt.Errorf("%s: no cluster: %w", uat, ErrSidecar))
			case u.BindPort > 65535:
				errs = append(errs, fmt.Errorf("%s: bind port %d: %w", uat, u.BindPort, ErrSidecar))
			case u.Protocol != "tcp" && !HTTPProtocol(u.Protocol):
				errs = append(errs, fmt.Errorf("%s: protocol %q: must be tcp, http, http2 or grpc: %w", uat, u.Protocol, ErrSidecar))
			case u.Routes != nil && !HTTPProtocol(u.Protocol):
				errs = append(errs, fmt.Errorf("%s: HTTP routes for a tcp upstream: %w", uat, ErrSidecar))
			}
		}
		errs = append(errs, s.validateTransparent(at)...)
		names := map[string]bool{}
		type bind struct {
			addr string
			port uint32
		}
		binds := map[bind]string{}
		for _, l := range slices.Concat(g.Listeners, s.Listeners(g.Name)) {
			if names[l.Name] {
				errs = append(errs, fmt.Errorf("%s: listener %q: %w", at, l.Name, ErrDuplicate))
			}
			names[l.Name] = true
			b := bind{l.Address, l.Port}
			if prev, ok := binds[b]; ok {
				errs = append(errs, fmt.Errorf("%s: listeners %q and %q both bind %s:%d: %w", at, prev, l.Name, l.Address, l.Port, ErrSidecar))
			}
			binds[b] = l.Name
		}
		if t := s.Transparent; t != nil {
			if prev, ok := binds[bind{"127.0.0.1", t.Port}]; ok {
				errs = append(errs, fmt.Errorf("%s: listener %q binds the transparent outbound port 127.0.0.1:%d: %w", at, prev, t.Port, ErrSidecar))
			}
		}
	}
	return errs
}
