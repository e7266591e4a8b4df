package ir

import (
	"fmt"
	"net/netip"
	"strconv"
)

// Transparent proxies (Consul's proxy.mode = "transparent"): the VM's
// iptables rules (agent redirect-traffic) send every outbound TCP
// connection to one listener of the sidecar, which matches each implicit
// upstream by the destination the application dialed (the service's
// Consul virtual IP, recovered by Envoy's original_dst listener filter)
// and passes everything else through, or refuses it, as the mesh config
// entry says. Inbound traffic reaches the public listener, as usual.
//
// An implicit upstream is an ordinary MeshUpstream of the sidecar with
// BindPort 0 and its VirtualIPs: its cluster, routes and dialers are
// those of any upstream; only its listener differs (a filter chain of the
// outbound listener, OutboundChains, instead of a listener of its own).

// Names Consul 1.15 gives a transparent proxy's resources, shared so the
// same Envoys can be pointed at either server.
const (
	// OriginalDestinationCluster is the passthrough cluster: Envoy
	// connects to the address the application dialed.
	OriginalDestinationCluster = "original-destination"
	// DefaultOutboundPort is the outbound listener's port when the
	// registration names none.
	DefaultOutboundPort = 15001
)

// TransparentOutbound is a transparent sidecar's outbound listener.
type TransparentOutbound struct {
	// Port is the outbound listener's (on 127.0.0.1, where iptables'
	// REDIRECT delivers): transparent_proxy.outbound_listener_port, or
	// DefaultOutboundPort.
	Port uint32
	// Passthrough sends connections to destinations outside the mesh on
	// to where they were headed (OriginalDestinationCluster, which must
	// be a cluster of the group); false refuses them (the mesh entry's
	// mesh_destinations_only).
	Passthrough bool
}

// OutboundListenerName is the outbound listener's name, Consul's:
// "outbound_listener:127.0.0.1:PORT".
func OutboundListenerName(port uint32) string {
	return "outbound_listener:127.0.0.1:" + strconv.FormatUint(uint64(port), 10)
}

// Implicit reports whether u is reached through the transparent outbound
// listener rather than a listener of its own.
func (u *MeshUpstream) Implicit() bool { return u.BindPort == 0 }

// OutboundChainName names the filter chain (and, for HTTP, the route
// configuration) of implicit upstream u: GROUP.outbound.SERVICE.
func OutboundChainName(group string, u *MeshUpstream) string {
	return group + ".outbound." + u.Service
}

// OutboundChains are the filter chains of the sidecar's outbound
// listener, one per implicit upstream in the order of Upstreams, each as
// the listener it would be (name, protocol, cluster or routes); the
// translator matches each on its upstream's VirtualIPs.
func (s *Sidecar) OutboundChains(group string) []Listener {
	var out []Listener
	for i := range s.Upstreams {
		u := &s.Upstreams[i]
		if !u.Implicit() {
			continue
		}
		l := u.listener(group)
		l.Name, l.Address, l.Port = OutboundChainName(group, u), "127.0.0.1", s.Transparent.Port
		if l.VirtualHosts != nil {
			l.VirtualHosts[0].Name = u.Service
		}
		out = append(out, l)
	}
	return out
}

// validateTransparent checks a sidecar's implicit upstreams and outbound
// listener; at names the group.
func (s *Sidecar) validateTransparent(at string) []error {
	var errs []error
	t := s.Transparent
	if t != nil && (t.Port == 0 || t.Port > 65535) {
		errs = append(errs, fmt.Errorf("%s: transparent outbound port %d: %w", at, t.Port, ErrSidecar))
	}
	seen := map[string]bool{}
	for i := range s.Upstreams {
		u := &s.Upstreams[i]
		if !u.Implicit() {
			if len(u.VirtualIPs) > 0 {
				errs = append(errs, fmt.Errorf("%s upstream %q: virtual IPs on an upstream with a listener of its own: %w", at, u.Service, ErrSidecar))
			}
			continue
		}
		uat := fmt.Sprintf("%s implicit upstream %q", at, u.Service)
		if t == nil {
			errs = append(errs, fmt.Errorf("%s: an upstream without a bind port needs a transparent proxy: %w", uat, ErrSidecar))
		}
		if seen[u.Service] {
			errs = append(errs, fmt.Errorf("%s: twice: %w", uat, ErrDuplicate))
		}
		seen[u.Service] = true
		if len(u.VirtualIPs) == 0 {
			errs = append(errs, fmt.Errorf("%s: no virtual IP to match: %w", uat, ErrSidecar))
		}
		for _, ip := range u.VirtualIPs {
			if _, err := netip.ParseAddr(ip); err != nil {
				errs = append(errs, fmt.Errorf("%s: virtual IP %q: %w", uat, ip, ErrSidecar))
			}
		}
	}
	return errs
}
