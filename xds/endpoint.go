package xds

import (
	"cmp"
	"net/netip"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

var healthStatuses = map[ir.Health]corev3.HealthStatus{
	ir.Healthy:   corev3.HealthStatus_HEALTHY,
	ir.Unhealthy: corev3.HealthStatus_UNHEALTHY,
	ir.Draining:  corev3.HealthStatus_DRAINING,
}

type localityKey struct {
	priority     uint32
	region, zone string
}

// failoverOverprovisioning is the overprovisioning factor (in percent) of a
// load assignment with more than one priority. Envoy's default (140) starts
// moving traffic to the next priority as soon as fewer than ~72% of a
// priority's hosts are healthy; failover datacenters are meant to take
// traffic only when the preferred tier has no healthy host, so the factor
// is large enough that any healthy host keeps all traffic (Consul's own
// choice for its failover targets).
const failoverOverprovisioning = 100000

// maxLocalityWeight bounds a locality's weight so the sum over the
// localities of one priority stays below 2^32, which both Envoy and gRPC
// require, even with many localities of many heavy endpoints.
const maxLocalityWeight = 1 << 24

// buildLoadAssignment groups a cluster's endpoints by priority and locality,
// in a stable order so equal endpoint sets always marshal to equal bytes.
// Priorities are renumbered densely from 0 in their order: Envoy requires
// priorities without gaps (a failover tier with no endpoints would leave
// one, and ring-hash clusters crash on it in some Envoy versions).
func buildLoadAssignment(c *ir.Cluster) *endpointv3.ClusterLoadAssignment {
	groups := map[localityKey][]ir.Endpoint{}
	for _, e := range uniqueEndpoints(c.Endpoints) {
		k := localityKey{e.Priority, e.Locality.Region, e.Locality.Zone}
		groups[k] = append(groups[k], e)
	}
	keys := make([]localityKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b localityKey) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(a.region, b.region), cmp.Compare(a.zone, b.zone))
	})

	cla := &endpointv3.ClusterLoadAssignment{ClusterName: c.Name}
	var dense uint32
	for i, k := range keys {
		if i > 0 && k.priority != keys[i-1].priority {
			dense++
		}
		eps := groups[k]
		slices.SortFunc(eps, func(a, b ir.Endpoint) int {
			return cmp.Or(a.Address.Compare(b.Address), cmp.Compare(a.Port, b.Port))
		})
		// Always a locality, even an empty one, and always a weight: gRPC's
		// xDS client rejects an assignment with a locality missing and
		// ignores localities without a weight (gRFC A27), and Envoy
		// ignores locality weights unless the cluster asks for
		// locality-weighted balancing. The weight is the locality's total
		// endpoint weight, so localities share traffic like their hosts.
		lle := &endpointv3.LocalityLbEndpoints{
			Priority: dense,
			Locality: &corev3.Locality{Region: k.region, Zone: k.zone},
		}
		var total uint64
		for _, e := range eps {
			total += uint64(e.Weight)
		}
		lle.LoadBalancingWeight = wrapperspb.UInt32(uint32(max(1, min(total, maxLocalityWeight))))
		for _, e := range eps {
			lle.LbEndpoints = append(lle.LbEndpoints, &endpointv3.LbEndpoint{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: socketAddress(e.Address.String(), e.Port),
				}},
				HealthStatus:        healthStatuses[e.Health],
				LoadBalancingWeight: wrapperspb.UInt32(e.Weight),
			})
		}
		cla.Endpoints = append(cla.Endpoints, lle)
	}
	if dense > 0 {
		cla.Policy = &endpointv3.ClusterLoadAssignment_Policy{OverprovisioningFactor: wrapperspb.UInt32(failoverOverprovisioning)}
	}
	return cla
}

func socketAddress(addr string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Protocol:      corev3.SocketAddress_TCP,
		Address:       addr,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// uniqueEndpoints keeps one endpoint per address and port: gRPC's xDS
// client rejects a whole assignment that lists an address twice (two
// Consul registrations of one process, say). The one kept is the most
// preferred (lowest priority, then healthy before unhealthy before
// draining, then the heaviest).
func uniqueEndpoints(eps []ir.Endpoint) []ir.Endpoint {
	type addrPort struct {
		addr netip.Addr
		port uint32
	}
	best := make(map[addrPort]int, len(eps))
	out := make([]ir.Endpoint, 0, len(eps))
	for _, e := range eps {
		k := addrPort{e.Address, e.Port}
		i, seen := best[k]
		if !seen {
			best[k] = len(out)
			out = append(out, e)
			continue
		}
		if o := out[i]; cmp.Or(cmp.Compare(e.Priority, o.Priority), cmp.Compare(e.Health, o.Health), cmp.Compare(o.Weight, e.Weight)) < 0 {
			out[i] = e
		}
	}
	return out
}
