package envoycompat

import (
	"maps"
	"slices"
	"sync/atomic"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Rewrite returns what Envoys of class c are served of items (resources
// as translated) and notes of what was served differently, sorted. A
// resource that needs no change is returned as it is; one that does is
// a rewritten copy: items are never modified. The current class gets
// items itself.
func Rewrite(c Class, items []types.Resource) ([]types.Resource, []string) {
	return (*Memo)(nil).Rewrite(c, items)
}

// Memo remembers what each class was served of each translated resource
// across translations. The daemon's Translator keeps the object of a
// resource that did not change, so its rewritten copy is kept too, and
// the serving cache, which compares objects first, does not encode
// a thousand unchanged copies again for one endpoint that changed. It
// keeps the copies the last two translations used (Next). Not safe for
// concurrent use; the nil Memo remembers nothing.
type Memo struct {
	m   map[memoKey]*memoEntry
	gen uint64 // the translation being served (Next counts them)
}

type memoKey struct {
	class Class
	res   types.Resource
}

type memoEntry struct {
	res   types.Resource
	notes []string
	used  uint64 // the last translation that used it
}

// Next starts a translation: copies of resources that neither it nor the
// one before uses are forgotten. Entries are marked, not moved, so a
// translation that keeps its resources allocates nothing here.
func (m *Memo) Next() {
	m.gen++
	for k, e := range m.m {
		if e.used+1 < m.gen {
			delete(m.m, k)
		}
	}
}

// Rewrite is the package's Rewrite, remembering each resource's copy.
func (m *Memo) Rewrite(c Class, items []types.Resource) ([]types.Resource, []string) {
	if c.Current() || len(items) == 0 {
		return items, nil
	}
	all := map[string]bool{}
	var out []types.Resource // allocated on the first change
	for i, it := range items {
		res, notes := m.one(c, it)
		for _, n := range notes {
			all[n] = true
		}
		if res == it && out == nil {
			continue
		}
		if out == nil {
			out = slices.Clone(items[:i:i])
		}
		out = append(out, res)
	}
	if out == nil {
		out = items
	}
	return out, slices.Sorted(maps.Keys(all))
}

// one is what class c is served of it, remembered.
func (m *Memo) one(c Class, it types.Resource) (types.Resource, []string) {
	switch it.(type) {
	case *clusterv3.Cluster, *listenerv3.Listener, *routev3.RouteConfiguration:
	default:
		return it, nil // endpoints and secrets: nothing to rewrite
	}
	k := memoKey{c, it}
	if m != nil {
		if e := m.m[k]; e != nil {
			e.used = m.gen
			return e.res, e.notes
		}
	}
	rewrites.Add(1)
	r := &rewriter{c: c, notes: map[string]bool{}}
	e := &memoEntry{res: r.resource(it), notes: slices.Sorted(maps.Keys(r.notes))}
	if m != nil {
		if m.m == nil {
			m.m = map[memoKey]*memoEntry{}
		}
		e.used = m.gen
		m.m[k] = e
	}
	return e.res, e.notes
}

// rewrites counts the resources examined for a class (memo misses).
var rewrites atomic.Int64

// Rewrites is how many resources this process examined for an older
// class, remembered copies not counted: what the serving tests read to
// see that a class is rewritten once, not once per proxy.
func Rewrites() int64 { return rewrites.Load() }

// rewriter rewrites the resources of one class, collecting notes.
type rewriter struct {
	c     Class
	notes map[string]bool
}

// note records that f was served differently: what happened to it.
func (r *rewriter) note(f feature, what string) {
	r.notes[features[f].name+": "+what+" (Envoy < "+features[f].since.String()+")"] = true
}

// resource rewrites one resource: a copy when something changed.
func (r *rewriter) resource(it types.Resource) types.Resource {
	var cp proto.Message
	var changed bool
	switch m := it.(type) {
	case *clusterv3.Cluster:
		if r.c.has(lbPolicyExtensions) || m.GetLoadBalancingPolicy() == nil {
			return it
		}
		c := proto.Clone(m).(*clusterv3.Cluster)
		changed, cp = r.cluster(c), c
	case *listenerv3.Listener:
		l := proto.Clone(m).(*listenerv3.Listener)
		changed, cp = r.listener(l), l
	case *routev3.RouteConfiguration:
		rc := proto.Clone(m).(*routev3.RouteConfiguration)
		changed, cp = r.routeConfig(rc), rc
	default:
		return it
	}
	if !changed {
		return it
	}
	return cp.(types.Resource)
}

// cluster: the translator sets lb_policy to the same policy as the first
// entry of load_balancing_policy (gRFC A52's list, which it writes for
// proxyless clients), so an Envoy without the typed policies loses
// nothing when the list goes.
func (r *rewriter) cluster(c *clusterv3.Cluster) bool {
	c.LoadBalancingPolicy = nil
	r.note(lbPolicyExtensions, "left out; lb_policy says the same")
	return true
}

// listener rewrites the connection managers of every filter chain.
func (r *rewriter) listener(l *listenerv3.Listener) bool {
	changed := false
	chains := l.GetFilterChains()
	if d := l.GetDefaultFilterChain(); d != nil {
		chains = append(slices.Clip(chains), d)
	}
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			if tc := f.GetTypedConfig(); tc != nil && r.typed(tc, r.httpConnectionManager) {
				changed = true
			}
		}
	}
	if a := l.GetApiListener().GetApiListener(); a != nil && r.typed(a, r.httpConnectionManager) {
		changed = true
	}
	return changed
}

// routeConfig rewrites the per-filter config of every virtual host and
// route.
func (r *rewriter) routeConfig(rc *routev3.RouteConfiguration) bool {
	changed := false
	for _, vh := range rc.GetVirtualHosts() {
		if r.perFilter(vh.TypedPerFilterConfig, func(p *routev3.CorsPolicy) bool { vh.Cors = p; return true }) {
			changed = true
		}
		for _, rt := range vh.GetRoutes() {
			if r.perFilter(rt.TypedPerFilterConfig, func(p *routev3.CorsPolicy) bool {
				if a := rt.GetRoute(); a != nil {
					a.Cors = p
					return true
				}
				return false // a redirect or direct response: no cors field
			}) {
				changed = true
			}
		}
	}
	return changed
}

// typed rewrites the message in a with rw, if a holds one of the types
// rewriters know (typedRewriters), re-marshalling it when rw changed it.
func (r *rewriter) typed(a *anypb.Any, rw func(proto.Message) bool) bool {
	m, err := a.UnmarshalNew()
	if err != nil {
		return false // not ours to judge: the translator's ValidateAll passed it
	}
	if !rw(m) {
		return false
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return false
	}
	a.Value = b
	return true
}
