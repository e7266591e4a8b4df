package model

import (
	"cmp"
	"slices"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Transparent sidecars (proxy.mode = "transparent"), as Consul 1.15
// serves them: besides its explicit upstreams, the sidecar may call every
// service of the mesh its intentions let its service call (implicit
// upstreams), each matched on the outbound listener by the service's
// virtual IP; other destinations pass through to where they were headed
// unless the mesh entry says mesh_destinations_only.
//
// Where we differ from Consul (pinned by TestTransparentMatchesConsulXDS
// and TestTransparentImplicitUpstreams): Consul also makes a cluster for
// every catalog service its intentions allow that has no Connect
// endpoint (and so no virtual IP and no filter chain: the cluster is
// never used); we make clusters only for the upstreams we serve.

// originalDestinationTimeout is the passthrough cluster's connect
// timeout, Consul's.
const originalDestinationTimeout = 5 * time.Second

// transparent adds p's implicit upstreams to sc and makes its outbound
// listener; it returns the extra clusters of the group (the passthrough
// cluster) that are not upstream clusters.
func (mb *meshBuilder) transparent(who, group string, p consul.Proxy, sc *ir.Sidecar) []string {
	port := cmp.Or(p.OutboundPort, ir.DefaultOutboundPort)
	if port < 0 || port > 65535 || uint32(port) == sc.Port {
		mb.b.warn("%s: transparent proxy outbound_listener_port %d is out of range or the public port; %d is used", who, port, ir.DefaultOutboundPort)
		port = ir.DefaultOutboundPort
	}
	sc.Transparent = &ir.TransparentOutbound{Port: uint32(port), Passthrough: !mb.mesh.MeshDestinationsOnly}
	dc := p.Datacenter
	explicit := map[string]bool{}
	for _, u := range sc.Upstreams {
		if u.Datacenter == "" || u.Datacenter == dc {
			explicit[u.Service] = true
		}
	}
	for _, k := range mb.mesh.TransparentTargets() {
		s := k.Name
		// Consul leaves out the proxy's own service and the upstreams it
		// has a listener for.
		if s == p.Service || explicit[s] || !ir.QueryableServiceName(s) {
			continue
		}
		if !mb.mayCall(p.Service, s) {
			continue
		}
		vips := mb.virtualIPs(k, dc)
		if len(vips) == 0 {
			continue // nothing to match it by (Consul attaches no filter chain either)
		}
		// The proxy's own gateway mode overrides the target's, as for
		// its explicit upstreams.
		via := mb.upstreamGatewayMode(who, p, consul.Upstream{Service: s})
		base := via.prefix + ir.MeshClusterName(s, dc, mb.mesh.TrustDomain)
		mu := ir.MeshUpstream{Service: s, Protocol: mb.protocol(who, "", s), VirtualIPs: vips}
		mb.dial(base, via.mode, s, "", dc, dc, mu.Protocol, p.Service)
		mb.refs = append(mb.refs, meshRef{group: group, upstream: len(sc.Upstreams), route: -1, base: base, local: p.Service})
		mu.Routes = mb.upstreamRoutes(who, group, len(sc.Upstreams), &mu, dc, dc, p.Service, via)
		sc.Upstreams = append(sc.Upstreams, mu)
	}
	if !sc.Transparent.Passthrough {
		return nil
	}
	mb.clusters[ir.OriginalDestinationCluster] = ir.Cluster{
		Name: ir.OriginalDestinationCluster, ConnectTimeout: originalDestinationTimeout, OriginalDestination: true,
	}
	return []string{ir.OriginalDestinationCluster}
}

// mayCall reports whether the intentions of dest let src call it, as
// Consul decides a transparent proxy's implicit upstreams: the first
// matching rule decides, an L7 rule (permissions) counts as allowed (the
// permissions are enforced per request by dest's sidecar), no rule means
// the default. Intentions that cannot be resolved allow nothing.
func (mb *meshBuilder) mayCall(src, dest string) bool {
	in, err := mb.intentions.resolve(dest)
	if err != nil {
		return false
	}
	for _, r := range in.Rules {
		if r.Source != src && r.Source != "*" {
			continue
		}
		return r.Action != ir.IntentionDeny
	}
	return in.Default == ir.IntentionAllow
}

// virtualIPs are the virtual IPs of service k's Connect endpoints in dc
// (one, normally), sorted; from the registered sidecars when the mesh
// holds no endpoints (a fixture).
func (mb *meshBuilder) virtualIPs(k consul.ServiceKey, dc string) []string {
	eps, read := mb.mesh.Endpoints[k.String()]
	if !read && mb.mesh.Endpoints == nil {
		for _, p := range mb.mesh.Proxies {
			if p.Service == k.Name {
				eps = append(eps, p)
			}
		}
	}
	var out []string
	for _, e := range eps {
		if e.VirtualIP != "" && e.Datacenter == dc {
			out = append(out, e.VirtualIP)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
