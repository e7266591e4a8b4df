package consul

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// Remote mesh gateways: a sidecar whose upstream (or failover target) is
// in another datacenter reaches it through mesh gateways when its
// mesh_gateway mode says so, and a local mesh gateway forwards such
// traffic to the target datacenter's gateways (Consul's WAN-federated
// mesh). Both need the gateways of each such datacenter, with the
// addresses other datacenters reach them at, as Consul's proxycfg reads
// them (every mesh-gateway kind instance of that datacenter). The watcher
// lists the datacenter's mesh-gateway services and follows each one's
// health there, like the local proxy services; a datacenter that never
// answers never holds back the first publication.

// meshGatewayFilter selects mesh gateway services from a catalog list.
const meshGatewayFilter = `ServiceKind == "mesh-gateway"`

// gatewayDatacenters are the other datacenters whose mesh gateways are
// followed: those of the local sidecars' upstreams and of extra (the
// policy's failover targets), sorted.
func (m *Mesh) gatewayDatacenters(extra ...ServiceKey) []string {
	set := map[string]bool{}
	for _, k := range m.upstreams(extra...) {
		if k.Datacenter != "" {
			set[k.Datacenter] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// newRemoteGateways keeps the mesh gateways of a health answer.
func newRemoteGateways(entries []*api.ServiceEntry) []Proxy {
	return slices.DeleteFunc(NewProxies(entries), func(p Proxy) bool { return p.Kind != KindMeshGateway })
}

// fetchRemoteGateways reads dc's mesh gateways once (FetchMesh).
func fetchRemoteGateways(ctx context.Context, client *api.Client, dc string, stale bool) ([]Proxy, error) {
	q := (&api.QueryOptions{Datacenter: dc, AllowStale: stale, Filter: meshGatewayFilter}).WithContext(ctx)
	names, _, err := client.Catalog().Services(q)
	if err != nil {
		return nil, fmt.Errorf("list mesh gateways of %s: %w", dc, err)
	}
	var out []Proxy
	for _, n := range slices.Sorted(maps.Keys(names)) {
		entries, _, err := client.Health().Service(n, "", false, (&api.QueryOptions{Datacenter: dc, AllowStale: stale}).WithContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("health of %s in %s: %w", n, dc, err)
		}
		out = append(out, newRemoteGateways(entries)...)
	}
	sortProxies(out)
	return out, nil
}

func sortProxies(ps []Proxy) {
	slices.SortFunc(ps, func(a, b Proxy) int { return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID)) })
}

// remoteGatewayViews are the watcher's views of other datacenters' mesh
// gateways: a list per datacenter, a health view per (datacenter,
// service).
type remoteGatewayViews struct {
	lists, healths map[string]*meshWatch
	names          map[string][]string // by datacenter
	gateways       map[string][]Proxy  // by "dc/service"
}

func newRemoteGatewayViews() *remoteGatewayViews {
	return &remoteGatewayViews{lists: map[string]*meshWatch{}, healths: map[string]*meshWatch{}, names: map[string][]string{}, gateways: map[string][]Proxy{}}
}

// byDatacenter is what the views have read, for Mesh.RemoteGateways.
func (r *remoteGatewayViews) byDatacenter() map[string][]Proxy {
	out := map[string][]Proxy{}
	for dc := range r.lists {
		if _, read := r.names[dc]; !read {
			continue
		}
		gws := []Proxy{}
		for _, n := range r.names[dc] {
			gws = append(gws, r.gateways[dc+"/"+n]...)
		}
		sortProxies(gws)
		out[dc] = gws
	}
	return out
}

// gatewayViewKey is the key of dc's health view of service name.
func gatewayViewKey(dc, name string) string { return dc + "/" + name }

// runGatewayList follows dc's list of mesh gateway services.
func (w *MeshWatcher) runGatewayList(dc string, send func(context.Context, meshEvent), join func(string) *member) func(context.Context, uint64) {
	return func(ctx context.Context, g uint64) {
		opts := w.cfg.Query
		opts.Datacenter = dc
		v := view[[]string]{
			id: "catalog_services(mesh-gateway," + dc + ")",
			fetch: func(q *api.QueryOptions) ([]string, *api.QueryMeta, error) {
				q.Filter = meshGatewayFilter
				m, meta, err := w.cfg.Client.Catalog().Services(q)
				return slices.Sorted(maps.Keys(m)), meta, err
			},
			equal: slices.Equal[[]string], opts: opts, log: w.cfg.Logger, result: w.queryResult("catalog_services", w.remoteDatacenter(dc)),
		}
		v.slots = join(v.id)
		defer v.slots.leave()
		v.run(ctx, func(names []string, _ uint64, at time.Time) {
			send(ctx, meshEvent{kind: "gwlist", key: dc, gen: g, names: names, at: at})
		})
	}
}

// runGatewayHealth follows the health of dc's mesh gateway service name.
func (w *MeshWatcher) runGatewayHealth(dc, name string, send func(context.Context, meshEvent), join func(string) *member) func(context.Context, uint64) {
	return func(ctx context.Context, g uint64) {
		opts := w.cfg.Query
		opts.Datacenter = dc
		v := view[[]Proxy]{
			id: "health(" + name + "," + dc + ")",
			fetch: func(q *api.QueryOptions) ([]Proxy, *api.QueryMeta, error) {
				entries, meta, err := w.cfg.Client.Health().Service(name, "", false, q)
				return newRemoteGateways(entries), meta, err
			},
			equal: equalProxies, opts: opts, log: w.cfg.Logger, result: w.queryResult("health_service", w.remoteDatacenter(dc)),
		}
		v.slots = join(v.id)
		defer v.slots.leave()
		v.run(ctx, func(p []Proxy, _ uint64, at time.Time) {
			send(ctx, meshEvent{kind: "gateways", key: gatewayViewKey(dc, name), gen: g, proxies: p, at: at})
		})
	}
}

// queryResult reports a query's outcome to OnQuery, if set, with the
// datacenter it asked ("" for the local one, as remoteDatacenter says):
// an unreachable other datacenter, whose queries the local agent answers
// with errors, must not count as the local Consul being down (bridge's
// outages: consul_up, the reconnect hold).
func (w *MeshWatcher) queryResult(endpoint, dc string) func(error, time.Duration) {
	if w.cfg.OnQuery == nil {
		return nil
	}
	return func(err error, d time.Duration) { w.cfg.OnQuery(endpoint, dc, err, d) }
}

// remoteDatacenter is dc as OnQuery reports it: "" for the local one.
func (w *MeshWatcher) remoteDatacenter(dc string) string {
	if dc == w.cfg.Query.Datacenter {
		return ""
	}
	return dc
}

// reconcileGateways starts a health view for each of dc's mesh gateway
// services in names and stops those of services no longer listed (all of
// dc's with names nil).
func reconcileGateways(r *remoteGatewayViews, dc string, names []string, start func(map[string]*meshWatch, string, func(context.Context, uint64)), run func(string) func(context.Context, uint64)) {
	for key, mw := range r.healths {
		d, n, _ := strings.Cut(key, "/")
		if d == dc && !slices.Contains(names, n) {
			mw.cancel()
			delete(r.healths, key)
			delete(r.gateways, key)
		}
	}
	for _, n := range names {
		if key := gatewayViewKey(dc, n); r.healths[key] == nil {
			start(r.healths, key, run(n))
			r.healths[key].remote = true
		}
	}
}
