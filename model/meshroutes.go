package model

import (
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// mesh_routes: an HTTP upstream of a sidecar takes the policy's routes
// for its service (as Consul's service-router and service-splitter would
// for its own sidecars), each target being the mesh cluster of a service
// as this sidecar dials it (its leaf, the target's SPIFFE id).

// dial records that local's sidecars dial the mesh cluster base (the
// sidecars of service in dc), making the cluster on first use.
func (mb *meshBuilder) dial(base, mode, service, subset, dc, localDC, protocol, local string) {
	if mode == gatewayModeLocal || mode == gatewayModeRemote {
		// Also for a local target: its failover targets in other
		// datacenters go the same way (meshfailover.go).
		mb.gatewayModes[base] = mode
	}
	if c, ok := mb.clusters["mesh\x00"+base]; !ok {
		mb.clusters["mesh\x00"+base] = mb.meshTarget(base, service, subset, dc, localDC, protocol)
	} else if http2 := protocol == "http2" || protocol == "grpc"; c.HTTP2 != http2 {
		// One cluster serves every dialer: upstreams that disagree on
		// HTTP/2 (a per-upstream protocol) cannot all be served as asked.
		mb.b.warn("mesh cluster %q: %s's sidecars dial %s with protocol %q, another dialer with HTTP/2 %v, which the cluster keeps; set the protocol in %s's service-defaults so every dialer agrees",
			base, local, service, protocol, c.HTTP2, service)
	}
	if mb.dialers[base] == nil {
		mb.dialers[base] = map[string]bool{}
	}
	mb.dialers[base][local] = true
}

// upstreamRoutes are the routes of upstream u (the upstream-th of group's
// sidecar, whose service is local, in datacenter dc): nil without a
// mesh_routes block for its service, or when it cannot take one. Target
// cluster names are set in finish, once every dialer is known.
func (mb *meshBuilder) upstreamRoutes(who, group string, upstream int, u *ir.MeshUpstream, udc, dc, local string, via gatewayChoice) []ir.Route {
	b := mb.b
	mr := b.pol.MeshRoutesFor(u.Service)
	if mr == nil {
		return nil
	}
	switch {
	case !ir.HTTPProtocol(u.Protocol) && tcpChainTarget(mr) != nil && udc == dc:
		return nil // the resolver's target: tcpChainTarget
	case !ir.HTTPProtocol(u.Protocol):
		b.warn("%s: upstream %q is protocol %q, so mesh_routes %q (at %s) do not apply (routes need protocol http, http2 or grpc: set it in the service's service-defaults or the upstream's config); everything goes to %s's sidecars",
			who, u.Service, u.Protocol, mr.Service, mr.Source, u.Service)
		return nil
	case udc != dc:
		b.warn("%s: upstream %q is in datacenter %q; mesh_routes %q (at %s) apply to upstreams in the local datacenter only, so everything goes to %s's sidecars there",
			who, u.Service, udc, mr.Service, mr.Source, u.Service)
		return nil
	}
	routes := make([]ir.Route, 0, len(mr.Routes))
	for i, r := range mr.Routes {
		rt := b.route(r)
		rt.Name = routeName(u.Service, i)
		for j, t := range r.Targets {
			base := via.prefix + ir.MeshSubsetClusterName(t.Subset, t.Service, dc, mb.mesh.TrustDomain)
			mb.dial(base, via.mode, t.Service, t.Subset, dc, dc, mb.targetProtocol(who, t.Service, u), local)
			rt.Clusters[j].Name = base
			mb.refs = append(mb.refs, meshRef{group: group, upstream: upstream, route: i, target: j, base: base, local: local})
		}
		routes = append(routes, rt)
	}
	return routes
}

// targetProtocol is a route target's protocol: its service-defaults', else
// the upstream's (the target is reached with the upstream's requests).
func (mb *meshBuilder) targetProtocol(who, service string, u *ir.MeshUpstream) string {
	if mb.mesh.Protocols[service] == "" {
		return u.Protocol
	}
	p := mb.protocol(who, "", service)
	if !ir.HTTPProtocol(p) {
		mb.b.warn("%s: mesh_routes %q send HTTP requests to %q, whose protocol is %q (Consul refuses such a split); its sidecars get them anyway", who, u.Service, service, p)
	}
	return p
}

// MeshWatchTargets are the services whose connect health the mesh
// watcher (and plan) must read for the policy besides the registrations'
// upstreams: the mesh_routes targets, in the local datacenter (where
// mesh_routes apply), and the failover datacenters of the services the
// policy declares (a mesh cluster of such a service fails over to their
// sidecars there; remote reads never hold back the local mesh), and
// their other failover targets.
func MeshWatchTargets(pol *policy.Policy) []consul.ServiceKey {
	var out []consul.ServiceKey
	for _, s := range pol.MeshRouteTargets() {
		out = append(out, consul.ServiceKey{Name: s})
	}
	if pol.UsesMesh() {
		for _, s := range pol.Services {
			for _, dc := range s.FailoverDatacenters {
				out = append(out, consul.ServiceKey{Datacenter: dc, Name: s.ConsulName})
			}
			// Failover targets elsewhere (meshfailover.go); "" is the
			// local datacenter, as the watcher keys it.
			for _, subset := range slices.Sorted(maps.Keys(s.Failover)) {
				for _, t := range s.FailoverFor(subset) {
					out = append(out, consul.ServiceKey{Datacenter: t.Datacenter, Name: t.Service})
				}
			}
		}
	}
	return out
}

// applyOverride applies to c (a mesh cluster as one downstream's sidecars
// dial it) that downstream's service-defaults upstream_config override
// for c's service, as Consul does for that downstream's sidecars only:
// connect timeout, limits (as a circuit breaker) and passive health (as
// outlier detection). Unset fields keep the service's own settings.
func applyOverride(c *ir.Cluster, overrides []*api.UpstreamConfig) {
	i := slices.IndexFunc(overrides, func(o *api.UpstreamConfig) bool { return o != nil && o.Name == c.Service })
	if i < 0 {
		return
	}
	o := overrides[i]
	if o.ConnectTimeoutMs > 0 {
		c.ConnectTimeout = time.Duration(o.ConnectTimeoutMs) * time.Millisecond
	}
	if l := o.Limits; l != nil && (l.MaxConnections != nil || l.MaxPendingRequests != nil || l.MaxConcurrentRequests != nil) {
		cb := ir.CircuitBreaker{}
		if c.CircuitBreaker != nil {
			cb = *c.CircuitBreaker
		}
		for _, f := range []struct {
			v  *int
			to *uint32
		}{{l.MaxConnections, &cb.MaxConnections}, {l.MaxPendingRequests, &cb.MaxPendingRequests}, {l.MaxConcurrentRequests, &cb.MaxRequests}} {
			if f.v != nil && *f.v >= 0 {
				*f.to = uint32(*f.v)
			}
		}
		c.CircuitBreaker = &cb
	}
	if p := o.PassiveHealthCheck; p != nil {
		// Consul's defaults for what the check leaves unset.
		od := ir.OutlierDetection{Consecutive5xx: p.MaxFailures, Interval: 10 * time.Second, BaseEjectionTime: 30 * time.Second, MaxEjectionPercent: 10}
		if p.Interval > 0 {
			od.Interval = p.Interval
		}
		if p.BaseEjectionTime != nil && *p.BaseEjectionTime > 0 {
			od.BaseEjectionTime = *p.BaseEjectionTime
		}
		if p.MaxEjectionPercent != nil {
			od.MaxEjectionPercent = *p.MaxEjectionPercent
		}
		c.OutlierDetection = &od
	}
}

// tcpChainTarget is where mesh_routes send a TCP upstream: the one target
// of one route that matches everything, which is what a service's
// resolver alone (a default subset, a redirect) makes. Consul applies a
// resolver to every upstream of the service, routers and splitters to
// HTTP ones only. Nil for any other mesh_routes.
func tcpChainTarget(mr *policy.MeshRoutes) *policy.Target {
	if mr == nil || len(mr.Routes) != 1 {
		return nil
	}
	r := mr.Routes[0]
	m := r.Match
	if len(r.Targets) != 1 || m.Path != "" || m.PathRegex != "" || m.PathPrefix != "" && m.PathPrefix != "/" || m.Method != "" || len(m.Headers) > 0 || len(m.Query) > 0 {
		return nil
	}
	return &r.Targets[0]
}
