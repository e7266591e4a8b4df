package ir

import (
	"fmt"
	"slices"
	"strings"
)

// validateReach checks that every group's (and the proxyless clients')
// cluster list is sorted, names only served clusters, and holds every
// cluster the group's listeners refer to: a proxy given a route to a
// cluster it does not get would send that route's requests nowhere.
func (m *Model) validateReach() []error {
	var errs []error
	check := func(who string, names []string, listeners []Listener) {
		if !slices.IsSorted(names) {
			errs = append(errs, fmt.Errorf("%s clusters: %w", who, ErrUnsorted))
		}
		for _, n := range names {
			if m.Cluster(n) == nil {
				errs = append(errs, fmt.Errorf("%s cluster %q: %w", who, n, ErrUnknownCluster))
			}
		}
		for i := range listeners {
			for _, n := range listeners[i].ClusterRefs() {
				if _, ok := slices.BinarySearch(names, n); !ok && m.Cluster(n) != nil {
					errs = append(errs, fmt.Errorf("%s listener %q uses cluster %q, which the group does not get: %w", who, listeners[i].Name, n, ErrUnknownCluster))
				}
			}
		}
	}
	for _, g := range m.Groups {
		listeners := g.Listeners
		if g.Sidecar != nil {
			listeners = slices.Concat(listeners, g.Sidecar.Listeners(g.Name))
		}
		if g.Proxyless {
			listeners = m.ProxylessFor(&g)
		}
		if g.Gateway != nil {
			// The gateway's chains are not ir listeners; their clusters
			// are checked as a listener's would be.
			listeners = append(slices.Clone(listeners), Listener{Name: GatewayListenerName(g.Name), TCP: gatewayTargets(g.Gateway)})
		}
		check(fmt.Sprintf("group %q", g.Name), g.Clusters, listeners)
	}
	check("proxyless", m.ProxylessClusters, m.Proxyless)
	return errs
}

// ClusterRefs lists the clusters l sends traffic to (routes, weighted
// splits, mirrors, TCP targets), sorted and without duplicates.
func (l *Listener) ClusterRefs() []string {
	var out []string
	for _, t := range l.TCP {
		out = append(out, t.Name)
	}
	// The clusters the listener's filters call (access log and tracing
	// collectors): its proxies must hold them like any route target...
	for _, al := range l.HTTP.AccessLogs {
		if al.Collector != "" {
			out = append(out, al.Collector)
		}
	}
	if l.HTTP.Tracing != nil && l.HTTP.Tracing.Collector != "" {
		out = append(out, l.HTTP.Tracing.Collector)
	}
	// ...and the services its auth and rate limit filters call.
	if a := l.HTTP.ExtAuthz; a != nil && a.Service != "" {
		out = append(out, a.Service)
	}
	if r := l.HTTP.RateLimitService; r != nil && r.Service != "" {
		out = append(out, r.Service)
	}
	for _, p := range l.HTTP.JWTProviders {
		if p.JWKSCluster != "" {
			out = append(out, p.JWKSCluster)
		}
	}
	for _, vh := range l.VirtualHosts {
		for _, r := range vh.Routes {
			for _, c := range r.Clusters {
				out = append(out, c.Name)
			}
			if r.Mirror != nil {
				out = append(out, r.Mirror.Cluster)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ProxylessFor is the API listeners a proxyless group's clients get:
// Proxyless narrowed to the group's targets, if it names any.
func (m *Model) ProxylessFor(g *Group) []Listener {
	if g.ProxylessTargets == nil {
		return m.Proxyless
	}
	var out []Listener
	for _, l := range m.Proxyless {
		if _, ok := slices.BinarySearch(g.ProxylessTargets, l.Name); ok {
			out = append(out, l)
		}
	}
	return out
}

// SecretsOf lists the upstream secrets the named clusters use, sorted.
func (m *Model) SecretsOf(clusters []string) []string {
	var out []string
	for _, n := range clusters {
		if c := m.Cluster(n); c != nil {
			out = append(out, c.TLS.secretNames()...)
		}
	}
	slices.SortFunc(out, strings.Compare)
	return slices.Compact(out)
}
