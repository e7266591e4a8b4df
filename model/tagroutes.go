package model

import (
	"slices"
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
// local catalog's tags, once per format, and reports each tag that does
// not parse as a warning. The services they send to become clusters.
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
	byFormat := map[string][]tagroute.Route{}
	for _, p := range b.pol.Proxies {
		for _, l := range p.Listeners {
			if _, done := byFormat[l.TagRoutes]; l.TagRoutes != "" && !done {
				f := l.TagRoutes
				routes, warnings := tagroute.Routes(f, services)
				byFormat[f] = routes // read once per format, even when empty
				for _, w := range warnings {
					b.warn("tag routes (%s): %s", f, w)
				}
			}
		}
	}
	return byFormat
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
// virtual host that already serves the route's host (so the policy's own
// routes match first), or to a virtual host of their own.
func addTagRoutes(il *ir.Listener, routes []tagroute.Route) {
	for _, r := range routes {
		domain := r.Host
		if domain == "" {
			domain = "*"
		}
		i := slices.IndexFunc(il.VirtualHosts, func(vh ir.VirtualHost) bool { return slices.Contains(vh.Domains, domain) })
		if i < 0 {
			name := "tags"
			if r.Host != "" {
				name = "tags-" + strings.ReplaceAll(r.Host, ".", "-")
			}
			il.VirtualHosts = append(il.VirtualHosts, ir.VirtualHost{Name: name, Domains: []string{domain}})
			i = len(il.VirtualHosts) - 1
		}
		vh := &il.VirtualHosts[i]
		rt := r.Route
		rt.Name = routeName(vh.Name, len(vh.Routes))
		vh.Routes = append(vh.Routes, rt)
	}
}
