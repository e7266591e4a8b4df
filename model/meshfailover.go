package model

import (
	"cmp"
	"slices"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// Mesh failover, as Consul 1.15 serves a service-resolver's failover: the
// failing target's cluster becomes an aggregate cluster (same name, so
// routes are unchanged) over failover-target~TARGET, then
// failover-target~ each failover target, each an EDS mesh cluster with
// the target's own SNI, SPIFFE id and endpoints, and the failing target's
// connect timeout and load balancer (TestMeshFailoverMatchesConsulXDS).
// Envoy sends to the first with healthy hosts. A failover to the
// service's own sidecars in other datacenters is the same: one target
// per datacenter, as Consul's compiler makes them
// (TestMeshDatacenterFailoverMatchesConsulXDS). A target in another
// datacenter goes through mesh gateways as its mode says
// (TestMeshGatewayFailoverMatchesConsulXDS).

// meshTarget is the cluster base of service's sidecars (subset, dc), an
// aggregate over its failover targets when the policy gives it some; it
// adds the member clusters to mb.clusters.
func (mb *meshBuilder) meshTarget(base, service, subset, dc, localDC, protocol string) ir.Cluster {
	s := meshServiceSettings(mb.b.pol, service)
	targets := s.FailoverFor(subset)
	if len(targets) == 0 && dc == localDC {
		// Consul's Failover["*"] with Datacenters only: the same target
		// in each other datacenter, in order.
		for _, d := range s.FailoverDatacenters {
			if d != dc {
				targets = append(targets, policy.FailoverTarget{Service: service, Subset: subset, Datacenter: d})
			}
		}
	}
	mode := mb.gatewayModes[base]
	if len(targets) == 0 {
		return mb.meshCluster(base, service, subset, dc, localDC, protocol, mode)
	}
	first := mb.meshCluster(base, service, subset, dc, localDC, protocol, mode)
	agg := ir.Cluster{Name: base, Service: service, Subset: subset, ConnectTimeout: first.ConnectTimeout}
	// Members of a customized chain (an upstream's gateway mode override)
	// carry its prefix too, after failover-target~, as Consul names them.
	prefix := strings.TrimSuffix(base, sniOf(base))
	// add appends target name's member, made (once for every aggregate
	// that holds it) by mk.
	add := func(name string, mk func() ir.Cluster) {
		member := ir.FailoverTargetPrefix + prefix + name
		if slices.Contains(agg.Aggregate, member) {
			return
		}
		agg.Aggregate = append(agg.Aggregate, member)
		if _, ok := mb.clusters["mesh\x00"+member]; !ok {
			c := mk()
			c.Name = member // the SNI stays the target's name
			mb.clusters["mesh\x00"+member] = c
		}
	}
	add(sniOf(base), func() ir.Cluster { return first })
	for _, t := range targets {
		tdc := cmp.Or(t.Datacenter, dc)
		name := ir.MeshSubsetClusterName(t.Subset, t.Service, tdc, mb.mesh.TrustDomain)
		add(name, func() ir.Cluster {
			// Consul's override applies to every target of the chain;
			// without one, each target takes its own service's mode.
			tmode := mb.mesh.GatewayModes.Of(t.Service)
			if prefix != "" {
				tmode = mode
			}
			c := mb.meshCluster(name, t.Service, t.Subset, tdc, localDC, protocol, tmode)
			// Consul 1.15 applies the failing target's resolver to all of
			// its failover targets: connect timeout and load balancer.
			c.ConnectTimeout, c.LBPolicy = first.ConnectTimeout, first.LBPolicy
			return c
		})
	}
	return agg
}

// shareAggregateDialers gives each failover target's cluster the
// dialers of the aggregates that send to it: each dialer's sidecars
// present their own leaf to every target.
func (mb *meshBuilder) shareAggregateDialers() {
	for k, c := range mb.clusters {
		base := k[len("mesh\x00"):]
		for _, m := range c.Aggregate {
			if mb.dialers[m] == nil {
				mb.dialers[m] = map[string]bool{}
			}
			for local := range mb.dialers[base] {
				mb.dialers[m][local] = true
			}
		}
	}
}

// memberName is the name of an aggregate's member cluster as local's
// sidecars dial it (see finish).
func (mb *meshBuilder) memberName(member, local string) string {
	if len(mb.dialers[member]) > 1 {
		return member + "/" + local
	}
	return member
}

// failoverEndpoints are the endpoints of service s's cluster (of subset
// sub, nil for all of it) outside the mesh: its own datacenter tiers, or,
// where the policy fails it over to other targets, its local instances
// then each target's healthy instances a priority lower than the last,
// the same order the mesh's aggregate cluster tries them in.
func (b *builder) failoverEndpoints(s *policy.Service, tiers [][]consul.Instance, sub *policy.Subset) []ir.Endpoint {
	subset := ""
	if sub != nil {
		subset = sub.Name
	}
	targets := s.FailoverFor(subset)
	if len(targets) == 0 {
		return b.endpoints(s, tiers, sub)
	}
	out := b.endpoints(s, tiers[:1], sub)
	for i, t := range targets {
		var tsub *policy.Subset
		if t.Subset != "" {
			if tsub = meshServiceSettings(b.pol, t.Service).SubsetNamed(t.Subset); tsub == nil {
				b.warn("service %q fails over to subset %q of %q, which declares no such subset; that target adds no endpoints", s.Name, t.Subset, t.Service)
				continue
			}
		}
		for _, ep := range b.endpoints(s, [][]consul.Instance{b.instances(t.Datacenter, t.Service)}, tsub) {
			ep.Priority = uint32(i + 1)
			out = append(out, ep)
		}
	}
	return out
}
