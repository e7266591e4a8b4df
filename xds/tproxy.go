package xds

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	originaldstv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// A transparent sidecar's outbound listener, as Consul 1.15 serves it
// (agent/xds listeners.go, transparent mode): named
// "outbound_listener:127.0.0.1:PORT", with the original_dst listener
// filter (the connection's destination before iptables redirected it),
// one filter chain per implicit upstream matched on its virtual IPs
// (sorted by the first of them, as Consul sorts), and a default chain to
// the "original-destination" cluster unless the mesh allows mesh
// destinations only (then a connection no chain matches is closed).
//
// Where we differ from Consul: its filter chains have no name and its
// stat prefixes are "upstream.SERVICE.default.default.DC"; ours are named
// and prefixed GROUP.outbound.SERVICE, as our upstream listeners are
// named after their group. An HTTP upstream's routes come over RDS (route
// configuration GROUP.outbound.SERVICE) where Consul inlines the default
// route; the route sends to the same cluster.

// outboundStatPrefix is the passthrough chain's, Consul's.
const outboundStatPrefix = "upstream." + ir.OriginalDestinationCluster

// buildTransparentOutbound is group g's outbound listener and the route
// configurations of its HTTP chains; nil when g's sidecar is not
// transparent or the listener would have no chain at all (Consul then
// serves none either).
func buildTransparentOutbound(g *ir.Group) (*listenerv3.Listener, []*routev3.RouteConfiguration, []ir.Listener, error) {
	s := g.Sidecar
	if s == nil || s.Transparent == nil {
		return nil, nil, nil, nil
	}
	chains := s.OutboundChains(g.Name)
	vips := map[string][]string{}
	for i := range s.Upstreams {
		if u := &s.Upstreams[i]; u.Implicit() {
			vips[ir.OutboundChainName(g.Name, u)] = u.VirtualIPs
		}
	}
	name := ir.OutboundListenerName(s.Transparent.Port)
	out := &listenerv3.Listener{
		Name:             name,
		Address:          socketAddress("127.0.0.1", s.Transparent.Port),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
		ListenerFilters: []*listenerv3.ListenerFilter{{
			Name:       wellknown.OriginalDestination,
			ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&originaldstv3.OriginalDst{})},
		}},
	}
	var routes []*routev3.RouteConfiguration
	for i := range chains {
		l := &chains[i]
		if err := unsupported(l); err != nil {
			return nil, nil, nil, err
		}
		match, err := prefixRanges(vips[l.Name])
		if err != nil {
			return nil, nil, nil, fmt.Errorf("listener %q, chain %q: %w", name, l.Name, err)
		}
		var filter *listenerv3.Filter
		if l.Protocol == "tcp" {
			filter = tcpProxyFilter(l)
		} else {
			filter = &listenerv3.Filter{Name: wellknown.HTTPConnectionManager, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(buildHCM(l))}}
			routes = append(routes, buildRouteConfig(l, false))
		}
		out.FilterChains = append(out.FilterChains, &listenerv3.FilterChain{
			Name:             l.Name,
			FilterChainMatch: &listenerv3.FilterChainMatch{PrefixRanges: match},
			Filters:          []*listenerv3.Filter{filter},
		})
	}
	slices.SortStableFunc(out.FilterChains, func(a, b *listenerv3.FilterChain) int {
		return strings.Compare(chainSortKey(a), chainSortKey(b))
	})
	if s.Transparent.Passthrough {
		out.DefaultFilterChain = &listenerv3.FilterChain{Filters: []*listenerv3.Filter{{
			Name: wellknown.TCPProxy,
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(&tcpproxyv3.TcpProxy{
				StatPrefix:       outboundStatPrefix,
				ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: ir.OriginalDestinationCluster},
			})},
		}}}
	}
	if len(out.FilterChains) == 0 && out.DefaultFilterChain == nil {
		return nil, nil, nil, nil
	}
	slices.SortFunc(routes, func(a, b *routev3.RouteConfiguration) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, routes, chains, nil
}

// chainSortKey is Consul's order of outbound filter chains: by the first
// prefix range ("ADDR/LEN:PORT").
func chainSortKey(c *listenerv3.FilterChain) string {
	m := c.GetFilterChainMatch()
	if len(m.GetPrefixRanges()) == 0 {
		return ""
	}
	p := m.GetPrefixRanges()[0]
	return fmt.Sprintf("%s/%d:%d", p.GetAddressPrefix(), p.GetPrefixLen().GetValue(), m.GetDestinationPort().GetValue())
}

// prefixRanges matches each address exactly (/32, /128), sorted as
// Consul sorts them (by the address's text).
func prefixRanges(ips []string) ([]*corev3.CidrRange, error) {
	if len(ips) == 0 {
		return nil, fmt.Errorf("no virtual IP to match: %w", ErrUnsupported)
	}
	out := make([]*corev3.CidrRange, 0, len(ips))
	for _, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("virtual IP %q: %w", s, err)
		}
		out = append(out, &corev3.CidrRange{AddressPrefix: a.String(), PrefixLen: wrapperspb.UInt32(uint32(a.BitLen()))})
	}
	slices.SortFunc(out, func(a, b *corev3.CidrRange) int { return cmp.Compare(a.GetAddressPrefix(), b.GetAddressPrefix()) })
	return out, nil
}

// originalDestinationCluster is Consul's passthrough cluster: Envoy
// connects to the connection's original destination.
func originalDestinationCluster(c *ir.Cluster) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 c.Name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST},
		ConnectTimeout:       durationpb.New(c.ConnectTimeout),
		LbPolicy:             clusterv3.Cluster_CLUSTER_PROVIDED,
	}
}

// addTransparentOutbound adds group g's outbound listener and its routes
// to r (keeping r's slices sorted by name) and to fresh (validated with
// the group's new objects).
func addTransparentOutbound(g *ir.Group, r, fresh *Resources) error {
	l, routes, chains, err := buildTransparentOutbound(g)
	if err != nil || l == nil {
		return err
	}
	fresh.Listeners = append(fresh.Listeners, l)
	fresh.Routes = append(fresh.Routes, routes...)
	r.Listeners = append(r.Listeners, l)
	slices.SortStableFunc(r.Listeners, func(a, b *listenerv3.Listener) int { return strings.Compare(a.GetName(), b.GetName()) })
	r.Routes = append(r.Routes, routes...)
	slices.SortStableFunc(r.Routes, func(a, b *routev3.RouteConfiguration) int { return strings.Compare(a.GetName(), b.GetName()) })
	for i := range chains {
		r.addRouteSources(&chains[i])
	}
	return nil
}
