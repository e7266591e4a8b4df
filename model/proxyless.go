package model

import (
	"slices"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// defaultGRPCRoute names the route of a default API listener in config
// dumps (RDS route names are otherwise the policy's file:line).
const defaultGRPCRoute = "default"

// grpcTargets lists what every grpc_service route sends calls to.
func grpcTargets(pol *policy.Policy) []policy.Target {
	var out []policy.Target
	for _, g := range pol.GRPCServices {
		for _, r := range g.Routes {
			out = append(out, r.Targets...)
		}
	}
	return out
}

// proxyless builds the API listeners proxyless gRPC clients get: one per
// grpc_service block, and for every service cluster (not subsets) that no
// grpc_service names, a default one sending every call to that cluster, so
// xds:///SERVICE works without any policy.
func (b *builder) proxyless(clusters []ir.Cluster) []ir.Listener {
	var out []ir.Listener
	for _, g := range b.pol.GRPCServices {
		vh := ir.VirtualHost{Name: g.Name, Domains: []string{"*"}}
		l := ir.Listener{Name: g.Name}
		for i, r := range g.Routes {
			rt := b.route(r)
			rt.Name = routeName(vh.Name, i)
			if rt.Fault != nil {
				l.UsesFault = true
			}
			vh.Routes = append(vh.Routes, rt)
		}
		l.VirtualHosts = []ir.VirtualHost{vh}
		out = append(out, l)
	}
	for _, c := range clusters {
		if c.Subset != "" || b.pol.GRPCService(c.Name) != nil {
			continue
		}
		rt := ir.Route{
			Name:     routeName(c.Name, 0),
			Source:   defaultGRPCRoute,
			Match:    ir.RouteMatch{PathPrefix: "/", CaseSensitive: true},
			Clusters: []ir.WeightedCluster{{Name: c.Name, Weight: 1}},
		}
		if s := b.pol.Service(c.Name); s != nil && s.LBPolicy == ir.LBRingHash {
			rt.HashPolicies = s.HashPolicies
		}
		out = append(out, ir.Listener{
			Name:         c.Name,
			VirtualHosts: []ir.VirtualHost{{Name: c.Name, Domains: []string{"*"}, Routes: []ir.Route{rt}}},
		})
	}
	slices.SortFunc(out, func(a, b ir.Listener) int { return strings.Compare(a.Name, b.Name) })
	return out
}
