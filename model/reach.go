package model

import (
	"slices"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// What each group may see. A proxy gets the clusters its group's policy
// reaches and nothing else: an Envoy holding every cluster costs ~20× the
// memory on both sides, and a proxy that is served a backend can reach it.
// So reach is computed here, from the resolved listeners (what the
// proxies will actually route to), not from the policy's text.

// reach sets every group's clusters and the proxyless clients', and
// whether nodes in no group get everything.
func (b *builder) reach(m *ir.Model) {
	all := make([]string, len(m.Clusters))
	for i, c := range m.Clusters {
		all[i] = c.Name
	}
	m.UnmatchedAll = b.pol.UnmatchedNodes != policy.UnmatchedNone
	m.ProxylessClusters = reached(m, m.Proxyless, nil)
	for i := range m.Groups {
		g := &m.Groups[i]
		p := b.pol.ProxyFor(g.Name)
		switch {
		case g.Proxyless:
			if p != nil && len(p.Upstreams) > 0 {
				g.ProxylessTargets = []string{}
				for _, u := range p.Upstreams {
					if !slices.ContainsFunc(m.Proxyless, func(l ir.Listener) bool { return l.Name == u }) {
						b.warn("proxy %q: upstream %q is no xDS target (no grpc_service block and no service cluster of that name); its clients cannot dial xds:///%s", g.Name, u, u)
						continue
					}
					g.ProxylessTargets = append(g.ProxylessTargets, u)
				}
			}
			g.Clusters = reached(m, m.ProxylessFor(g), nil)
		case p != nil && p.ExportAllServices:
			g.Clusters = all
		default:
			var up []string
			if p != nil {
				up = p.Upstreams
			}
			g.Clusters = reached(m, g.Listeners, up)
		}
	}
}

// reached lists the served clusters that listeners send traffic to, plus
// extra, sorted.
func reached(m *ir.Model, listeners []ir.Listener, extra []string) []string {
	out := []string{}
	for i := range listeners {
		out = append(out, listeners[i].ClusterRefs()...)
	}
	out = append(out, extra...)
	slices.Sort(out)
	out = slices.Compact(out)
	return slices.DeleteFunc(out, func(n string) bool { return m.Cluster(n) == nil })
}
