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
// xds:///SERVICE works without any policy. The clusters returned are the
// proxyless copies its routes send to instead (see proxylessCopies).
func (b *builder) proxyless(clusters []*ir.Cluster) ([]ir.Listener, []ir.Cluster) {
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
		if l, ok := b.chainAPIListener(c.Name); ok {
			out = append(out, l)
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
	return out, proxylessCopies(out, clusters)
}

// proxylessCopies points the API listeners' routes at a copy of each
// cluster balanced least_request (gRFC A48), which grpc-node and gRPC
// C-core NACK: the copy (ir.ProxylessClusterPrefix) has the same
// endpoints, lb_policy round_robin, and gRFC A52's list [least_request,
// round_robin], so a client that reads the list and implements
// least_request (grpc-go, grpc-java) keeps it and every other one balances
// round robin. Envoys keep the cluster as the policy says.
func proxylessCopies(listeners []ir.Listener, clusters []*ir.Cluster) []ir.Cluster {
	byName := map[string]*ir.Cluster{}
	for _, c := range clusters {
		byName[c.Name] = c
	}
	made := map[string]bool{}
	var out []ir.Cluster
	for li := range listeners {
		for vi := range listeners[li].VirtualHosts {
			routes := listeners[li].VirtualHosts[vi].Routes
			for ri := range routes {
				for ci := range routes[ri].Clusters {
					wc := &routes[ri].Clusters[ci]
					c := byName[wc.Name]
					if c == nil || c.LBPolicy != ir.LBLeastRequest {
						continue
					}
					wc.Name = ir.ProxylessClusterPrefix + c.Name
					if made[wc.Name] {
						continue
					}
					made[wc.Name] = true
					cp := *c
					cp.Name, cp.LBPolicy = wc.Name, ir.LBRoundRobin
					cp.LBPolicies = []ir.LBPolicy{ir.LBLeastRequest, ir.LBRoundRobin}
					out = append(out, cp)
				}
			}
		}
	}
	return out
}

// chainAPIListener is the default API listener of service when it has a
// chain (Consul's discovery chain: its router's routes, its splitter's
// split, its resolver's default subset): gRPC clients dialing
// xds:///SERVICE follow it as Envoys and sidecars do. A chain with a
// route gRPC clients cannot be served (a rewrite, header changes, ...)
// is not followed, with a warning: the calls reach every instance.
func (b *builder) chainAPIListener(service string) (ir.Listener, bool) {
	ch := b.pol.ChainFor(service)
	if ch == nil {
		return ir.Listener{}, false
	}
	vh := ir.VirtualHost{Name: service, Domains: []string{"*"}}
	for i, r := range ch.Routes {
		if why := policy.GRPCUnsupported(r); why != "" {
			b.warn("gRPC clients dialing xds:///%s do not follow its chain (at %s): route %d has %s, which gRPC's xDS clients do not implement; their calls reach every instance of %s. Add a grpc_service %q block to route them.", service, ch.Source, i, why, service, service)
			return ir.Listener{}, false
		}
		rt := b.route(r)
		rt.Name = routeName(service, i)
		if rt.Retry != nil && len(rt.Retry.On) == 0 {
			// The proxies' default conditions (5xx, reset) mean nothing to
			// gRPC, which would not retry at all (as grpcRoute).
			rt.Retry.On = []string{"unavailable"}
		}
		vh.Routes = append(vh.Routes, rt)
	}
	return ir.Listener{Name: service, VirtualHosts: []ir.VirtualHost{vh}}, true
}
