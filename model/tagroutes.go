package model

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/tagroute"
)

// usesTagRoutes reports whether any listener reads routes from tags: the
// watcher must then see every local service's tags.
func usesTagRoutes(pol *policy.Policy) bool {
	for _, p := range pol.Proxies {
		for _, l := range p.Listeners {
			if l.TagRoutes != "" {
				return true
			}
		}
	}
	return false
}

// tagRoutes reads the routes of every listener with tag_routes from the
// local catalog's tags, per listener (its own virtual hosts and
// tag_routes owners decide whose tags may route which host), keyed by
// the listener's LDS name, and reports each tag that does not parse or
// whose claim is refused as a warning. The services they send to become
// clusters.
func (b *builder) tagRoutes() map[string][]tagroute.Route {
	if !usesTagRoutes(b.pol) || b.cat == nil {
		return nil
	}
	var services []tagroute.Service
	for _, s := range b.cat.Services {
		if s.Datacenter != "" {
			continue
		}
		ts := tagroute.Service{Name: s.Name}
		for _, in := range s.Instances {
			ts.Tags = append(ts.Tags, in.Tags...)
		}
		services = append(services, ts)
	}
	byListener := map[string][]tagroute.Route{}
	seen := map[string]bool{}
	for _, p := range b.pol.Proxies {
		for _, l := range p.Listeners {
			if l.TagRoutes == "" {
				continue
			}
			owners := tagroute.Owners{Allowed: l.TagRouteOwners}
			for _, vh := range l.VirtualHosts {
				owners.Domains = append(owners.Domains, vh.Domains...)
			}
			routes, warnings := tagroute.Routes(l.TagRoutes, services, owners)
			byListener[p.Name+"."+l.Name] = routes
			for _, w := range warnings {
				// Listeners alike warn alike: once is enough.
				if w = fmt.Sprintf("tag routes (%s): %s", l.TagRoutes, w); !seen[w] {
					seen[w] = true
					b.warn("%s", w)
				}
			}
		}
	}
	return byListener
}

// tagServices lists the services tag routes send to.
func tagServices(byFormat map[string][]tagroute.Route) []string {
	set := map[string]bool{}
	for _, routes := range byFormat {
		for _, r := range routes {
			for _, s := range r.Services {
				set[s] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// addTagRoutes appends tag routes to a listener: to the end of the
// virtual host that already serves the route's host, compared
// case-insensitively as Envoy does (the policy's own routes match first;
// tagroute admitted them only if tag_routes owners allows), or to a
// virtual host of their own, one per host, so that no domain repeats.
// A host the policy serves through a wildcard domain gets a virtual host
// of its own too (the exact domain), which Envoy then prefers over the
// wildcard: it starts as a copy of the wildcard's, routes and HTTP
// settings, so the host is answered as the policy answered it, plus the
// tag routes.
func addTagRoutes(il *ir.Listener, routes []tagroute.Route) {
	// The policy's virtual hosts as the policy wrote them, before tags
	// add routes or virtual hosts: what a copy starts from, whatever the
	// order of the tag routes.
	policyHosts := slices.Clone(il.VirtualHosts)
	var policyDomains []string
	for _, vh := range policyHosts {
		policyDomains = append(policyDomains, vh.Domains...)
	}
	for _, r := range routes {
		domain := strings.ToLower(r.Host)
		if domain == "" {
			domain = "*"
		}
		i := slices.IndexFunc(il.VirtualHosts, func(vh ir.VirtualHost) bool {
			return slices.ContainsFunc(vh.Domains, func(d string) bool { return strings.EqualFold(d, domain) })
		})
		if i < 0 {
			name := "tags"
			if domain != "*" {
				name = "tags-" + strings.ReplaceAll(domain, ".", "-")
			}
			// "a-b.c" and "a.b-c" would share a name: keep names unique.
			for n, base := 2, name; slices.ContainsFunc(il.VirtualHosts, func(vh ir.VirtualHost) bool { return vh.Name == name }); n++ {
				name = base + "-" + strconv.Itoa(n)
			}
			vh := ir.VirtualHost{Name: name, Domains: []string{domain}}
			if d := tagroute.PolicyDomain(policyDomains, domain); domain != "*" && d != "" {
				serving := policyHosts[slices.IndexFunc(policyHosts, func(vh ir.VirtualHost) bool { return slices.Contains(vh.Domains, d) })]
				vh.HTTP = serving.HTTP
				for _, rt := range serving.Routes {
					rt.Name = routeName(name, len(vh.Routes))
					vh.Routes = append(vh.Routes, rt)
				}
			}
			il.VirtualHosts = append(il.VirtualHosts, vh)
			i = len(il.VirtualHosts) - 1
		}
		vh := &il.VirtualHosts[i]
		rt := r.Route
		rt.Name = routeName(vh.Name, len(vh.Routes))
		vh.Routes = append(vh.Routes, rt)
	}
}
