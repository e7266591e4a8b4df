package model

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// A mesh gateway (Consul 1.15's agent/xds makeMeshGatewayListener) takes
// mesh traffic for the services of its datacenter and passes it, still
// encrypted end to end, to their sidecars: it routes by the SNI the
// caller sent (the service's mesh name), holds no key and checks no
// intention (the destination's sidecar does both). Consul routes with
// sni_cluster, which needs a cluster named exactly as the SNI; the
// bridge's clusters share one namespace with the sidecars' (where the
// name is taken by an mTLS cluster to the same service), so each
// service gets a filter chain matching its SNI explicitly instead.

// meshGateway is the group of one mesh gateway instance: a chain per
// local service with Connect endpoints (its sidecars or Connect-native
// instances), in the gateway's datacenter.
func (mb *meshBuilder) meshGateway(p consul.Proxy, taken map[string]bool, clusters map[string]ir.Cluster) (ir.Group, bool) {
	b := mb.b
	who := fmt.Sprintf("mesh gateway %q on node %q", p.ID, p.Node)
	if p.Port <= 0 || p.Port > 65535 {
		b.warn("%s: port %d is out of range; skipped", who, p.Port)
		return ir.Group{}, false
	}
	gw := &ir.Gateway{
		Kind: ir.GatewayMesh, ProxyID: p.ID, Node: p.Node, Service: p.Name, Datacenter: p.Datacenter,
		Address: cmp.Or(p.ServiceAddress, "0.0.0.0"), Port: uint32(p.Port),
	}
	g := ir.Group{Name: ir.SidecarGroupName(p.Node, p.ID), Gateway: gw, Clusters: []string{}}
	for _, s := range mb.localConnectServices() {
		sni := ir.MeshClusterName(s, p.Datacenter, mb.mesh.TrustDomain)
		cname := sni
		if taken[sni] {
			cname = sni + "/" + p.Name // a sidecar's (or a gateway's) cluster has Consul's name
		}
		if _, ok := clusters[cname]; !ok {
			set := meshServiceSettings(b.pol, s)
			// Plain TCP: the caller's TLS passes through to the sidecar.
			c := ir.Cluster{Name: cname, Service: s, ConnectTimeout: set.ConnectTimeout, LBPolicy: set.LBPolicy,
				CircuitBreaker: set.CircuitBreaker, OutlierDetection: set.OutlierDetection}
			c.Endpoints = mb.meshEndpoints(cname, s, "", set, p.Datacenter, p.Datacenter)
			if len(c.Endpoints) == 0 {
				continue // as Consul: a service without Connect instances gets no cluster
			}
			clusters[cname] = c
		}
		gw.Chains = append(gw.Chains, ir.GatewayChain{SNI: sni, Service: s, Cluster: cname})
		g.Clusters = append(g.Clusters, cname)
	}
	mb.remoteDatacenterChains(p, gw, &g, clusters)
	slices.SortFunc(gw.Chains, func(a, b ir.GatewayChain) int { return strings.Compare(a.SNI, b.SNI) })
	slices.Sort(g.Clusters)
	return g, true
}

// remoteDatacenterChains give a mesh gateway a chain per other datacenter
// whose gateways the bridge follows: a connection for any service there
// ("*.DC.internal.TRUST-DOMAIN", what a sidecar in local mode sends
// through this gateway) passes, TLS untouched, to that datacenter's
// gateways at their WAN addresses, as Consul's mesh gateway does.
func (mb *meshBuilder) remoteDatacenterChains(p consul.Proxy, gw *ir.Gateway, g *ir.Group, clusters map[string]ir.Cluster) {
	for _, dc := range slices.Sorted(maps.Keys(mb.mesh.RemoteGateways)) {
		if dc == p.Datacenter {
			continue
		}
		cname := ir.GatewayClusterName(dc, mb.mesh.TrustDomain)
		if _, ok := clusters[cname]; !ok {
			c := ir.Cluster{Name: cname, ConnectTimeout: remoteGatewayConnectTimeout}
			for _, r := range mb.mesh.RemoteGateways[dc] {
				in := consul.Instance{ID: r.ID, Node: r.Node, Datacenter: r.Datacenter, Address: r.WANAddress, Port: r.WANPort, NodeMeta: r.NodeMeta, Status: r.Status}
				ep, warn := endpoint(in, false)
				if warn != "" {
					mb.b.warn("mesh gateway %q of datacenter %q on node %q: %s", r.ID, dc, r.Node, warn)
					continue
				}
				c.Endpoints = append(c.Endpoints, ep)
			}
			if len(c.Endpoints) == 0 {
				continue // as Consul: a datacenter without gateways gets no chain
			}
			clusters[cname] = c
		}
		gw.Chains = append(gw.Chains, ir.GatewayChain{SNI: "*." + cname, Datacenter: dc, Cluster: cname})
		g.Clusters = append(g.Clusters, cname)
	}
}

// remoteGatewayConnectTimeout is Consul's for the clusters of other
// datacenters' gateways (its default; a gateway's connect_timeout_ms is
// not read).
const remoteGatewayConnectTimeout = 5 * time.Second

// localConnectServices are the local services with Connect instances the
// bridge knows of: the destinations of registered sidecars, the
// Connect-native services and the services linked to terminating
// gateways (whose Connect instances are those gateways), sorted.
func (mb *meshBuilder) localConnectServices() []string {
	set := map[string]bool{}
	for _, p := range mb.mesh.Proxies {
		if !p.IsGateway() && ir.QueryableServiceName(p.Service) {
			set[p.Service] = true
		}
	}
	for _, n := range slices.Concat(mb.mesh.Natives, mb.mesh.LinkedServices()) {
		if ir.QueryableServiceName(n) {
			set[n] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}
