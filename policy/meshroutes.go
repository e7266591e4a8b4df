package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// MeshRoutes is the `mesh_routes "SERVICE"` block: the routes a Connect
// sidecar's HTTP upstream SERVICE takes (what Consul's service-router and
// service-splitter entries do for its own sidecars). Targets name Consul
// services, whose mesh clusters (their sidecars) the model routes to; a
// route's Targets never have a Subset.
type MeshRoutes struct {
	Service string
	Routes  []*Route
	Source  string
}

// meshRoutesBlock is `mesh_routes "SERVICE" { route { ... } }`.
type meshRoutesBlock struct {
	Service  string        `hcl:"service,label"`
	Routes   []*routeBlock `hcl:"route,block"`
	DefRange hcl.Range     `hcl:",def_range"`
}

// MeshRoutesFor returns the mesh_routes block of service, or nil.
func (p *Policy) MeshRoutesFor(service string) *MeshRoutes {
	if p == nil {
		return nil
	}
	for _, m := range p.MeshRoutes {
		if m.Service == service {
			return m
		}
	}
	return nil
}

// MeshRouteTargets lists, sorted, the services mesh_routes send requests
// to: the bridge follows their Connect health (their sidecars) as it does
// for registered upstreams, since a split may name a service no sidecar
// dials directly.
func (p *Policy) MeshRouteTargets() []string {
	if p == nil {
		return nil
	}
	set := map[string]bool{}
	for _, m := range p.MeshRoutes {
		for _, r := range m.Routes {
			for _, t := range r.Targets {
				if t.Service != "" {
					set[t.Service] = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// meshRoutes resolves the mesh_routes blocks of every document: one per
// service.
func (r *resolver) meshRoutes(docs []*Document) {
	seen := map[string]hcl.Range{}
	for _, d := range docs {
		for _, b := range d.meshRoutes {
			if prev, ok := seen[b.Service]; ok {
				r.add(b.DefRange, "Duplicate mesh_routes block",
					"mesh_routes %q is already defined at %s; each service's mesh routes may be declared once across all files and KV documents.", b.Service, pos(prev))
				continue
			}
			seen[b.Service] = b.DefRange
			r.pol.MeshRoutes = append(r.pol.MeshRoutes, r.meshRoutesBlock(b))
		}
	}
	slices.SortFunc(r.pol.MeshRoutes, func(a, b *MeshRoutes) int { return strings.Compare(a.Service, b.Service) })
	if len(r.pol.MeshRoutes) > 0 && !r.pol.UsesMesh() {
		first := r.pol.MeshRoutes[0]
		r.warn(seen[first.Service], "mesh_routes without a mesh",
			"mesh_routes %q applies to Connect sidecars' upstreams, which the bridge serves only with a mesh block (or a proxy declared sidecar_for); add mesh {} or remove the mesh_routes blocks.", first.Service)
	}
}

func (r *resolver) meshRoutesBlock(b *meshRoutesBlock) *MeshRoutes {
	m := &MeshRoutes{Service: b.Service, Source: pos(b.DefRange)}
	if !ir.QueryableServiceName(b.Service) {
		r.add(b.DefRange, "Invalid service name", unqueryable, b.Service)
	}
	if len(b.Routes) == 0 {
		r.add(b.DefRange, "mesh_routes without routes",
			"mesh_routes %q has no route block; add one, e.g. route { service = %q }, or remove the block (the upstream then sends everything to %s's sidecars).", b.Service, b.Service, b.Service)
	}
	for _, rb := range b.Routes {
		m.Routes = append(m.Routes, r.meshRoute(b.Service, rb))
	}
	return m
}

// meshRoute resolves a route of mesh_routes: the route block of proxy
// listeners, less what a sidecar's upstream listener cannot serve.
func (r *resolver) meshRoute(service string, b *routeBlock) *Route {
	where := fmt.Sprintf("route of mesh_routes %q", service)
	unsupported := func(rng hcl.Range, what, why string) {
		r.add(rng, "Unsupported in mesh_routes", "%s: %s: %s", where, what, why)
	}
	// A subset is a mesh cluster of its own, as Consul's
	// service-resolver subsets are (SUBSET.SERVICE.default.DC.internal.TD,
	// the sidecars whose registration has the subset's tags and meta).
	if b.Mirror != nil {
		unsupported(b.Mirror.DefRange, "mirror", "mirroring to a mesh service is not supported yet; mirror from a proxy listener route instead.")
	}
	// The upstream listener's HTTP connection manager has the router (and
	// the fault filter) only: per-route settings of other filters would
	// be ignored.
	for _, f := range routeFilters(b) {
		unsupported(f.rng, f.what, "a sidecar's upstream listener runs no HTTP filters but fault injection and the router; apply it at the destination (or in a proxy listener).")
	}
	// Targets are Consul services, which need no service block: only a
	// subset is checked (declared in the service block of that name).
	n := len(r.targets)
	rt := r.route(b, where)
	kept := r.targets[:n]
	for _, ref := range r.targets[n:] {
		if ref.Subset != "" {
			kept = append(kept, ref)
		}
	}
	r.targets = kept
	return rt
}
