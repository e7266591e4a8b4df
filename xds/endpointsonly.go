package xds

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Endpoint-only translation (issue 40). Translate walks every cluster,
// listener and reach set of the model, memo or not: with ten thousand
// clusters no proxy follows, that walk is what one health flip costs.
// TranslateEndpoints is told which clusters' endpoints are all that
// changed since the last model, and touches only those: their load
// assignments, the shared list and the reach sets that hold them.

// lastTranslation is the last successful translation, what
// TranslateEndpoints starts from.
type lastTranslation struct {
	model *ir.Model
	out   *Output
}

// TranslateEndpoints returns what Translate(m) returns, for an m that is
// the model last translated with only the endpoints of the named
// clusters (sorted) changed: the same slices of groups, listeners and
// secrets, the same cluster list but for those clusters' Endpoints. ok is
// false when it cannot tell (no last model, m not derived from it, a
// group that failed last time): the caller translates m whole.
func (t *Translator) TranslateEndpoints(m *ir.Model, changed []string) (out *Output, ok bool, err error) {
	last := t.last
	if last == nil || !sameStructure(last.model, m) || len(last.out.Failed) > 0 || last.out.ProxylessFailed != nil {
		return nil, false, nil
	}
	fresh := map[string]memoCluster{}
	var errs []error
	for _, name := range changed {
		c := m.Cluster(name)
		mc, known := t.clusters[name]
		if c == nil || !known {
			return nil, false, nil
		}
		errs = append(errs, c.EndpointErrors()...)
		if c.OriginalDestination || len(c.Aggregate) > 0 || (slices.Equal(mc.in.Endpoints, c.Endpoints) && mc.endpoint != nil) {
			continue // no load assignment, or the same one
		}
		mc.endpoint = buildLoadAssignment(c)
		mc.in.Endpoints = slices.Clone(c.Endpoints)
		fresh[name] = mc
	}
	if len(errs) > 0 {
		// Model.Validate's answer: nothing else it checks can change.
		return nil, true, fmt.Errorf("model: %w", errors.Join(errs...))
	}
	check := &Resources{}
	for _, name := range slices.Sorted(maps.Keys(fresh)) {
		check.Endpoints = append(check.Endpoints, fresh[name].endpoint)
	}
	if err := validateAll(check); err != nil {
		return nil, true, err
	}
	out = t.patchOutput(last.out, fresh)
	// The clusters' memory is changed in place (Fork copies it), the
	// reach sets' replaced.
	maps.Copy(t.clusters, fresh)
	t.reachMemo = patchReachMemo(t.reachMemo, out, last.out)
	t.last = &lastTranslation{model: m, out: out}
	return out, true, nil
}

// sameStructure reports whether m can be last with only cluster
// endpoints changed: the same groups, proxyless listeners and secrets (the
// very slices) and as many clusters.
func sameStructure(last, m *ir.Model) bool {
	return last != nil && m != nil && len(last.Clusters) == len(m.Clusters) &&
		sameSlice(last.Groups, m.Groups) && sameSlice(last.Proxyless, m.Proxyless) && sameSlice(last.Secrets, m.Secrets) &&
		sameSlice(last.ProxylessClusters, m.ProxylessClusters) && sameSlice(last.MeshGRPCServers, m.MeshGRPCServers) &&
		last.Mesh == m.Mesh && last.UnmatchedAll == m.UnmatchedAll
}

// sameSlice reports whether a and b are the same slice, not only equal.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// patchOutput is prev with the load assignments of fresh in place of
// their clusters' old ones, everywhere prev holds them; anything without
// one is prev's own object.
func (t *Translator) patchOutput(prev *Output, fresh map[string]memoCluster) *Output {
	swap := map[*endpointv3.ClusterLoadAssignment]*endpointv3.ClusterLoadAssignment{}
	for name, mc := range fresh {
		if old := t.clusters[name].endpoint; old != nil {
			swap[old] = mc.endpoint
		}
	}
	patched := map[*Resources]*Resources{}
	patch := func(r *Resources) *Resources {
		if r == nil {
			return nil
		}
		if p, ok := patched[r]; ok {
			return p
		}
		p := patchEndpoints(r, swap)
		patched[r] = p
		return p
	}
	out := *prev
	out.Shared = patch(prev.Shared)
	out.Reach = make(map[string]*Resources, len(prev.Reach))
	for g, r := range prev.Reach {
		out.Reach[g] = patch(r)
	}
	out.ProxylessReach = patch(prev.ProxylessReach)
	out.Unmatched = patch(prev.Unmatched)
	return &out
}

// patchEndpoints is r with swap's replacements made, r itself when it
// holds none of them. Endpoints are sorted by cluster name, so each is a
// binary search, not a walk of every load assignment.
func patchEndpoints(r *Resources, swap map[*endpointv3.ClusterLoadAssignment]*endpointv3.ClusterLoadAssignment) *Resources {
	var eps []*endpointv3.ClusterLoadAssignment
	for old, cur := range swap {
		i, ok := slices.BinarySearchFunc(r.Endpoints, old.GetClusterName(), func(e *endpointv3.ClusterLoadAssignment, n string) int {
			return strings.Compare(e.GetClusterName(), n)
		})
		if !ok || r.Endpoints[i] != old {
			continue
		}
		if eps == nil {
			eps = slices.Clone(r.Endpoints)
		}
		eps[i] = cur
	}
	if eps == nil {
		return r
	}
	p := *r
	p.Endpoints = eps
	return &p
}

// patchReachMemo is the reach sets' memory after patchOutput: each set
// prev's output held, by key, as out holds it now.
func patchReachMemo(memo map[string]*Resources, out, prev *Output) map[string]*Resources {
	now := map[*Resources]*Resources{prev.ProxylessReach: out.ProxylessReach, prev.Unmatched: out.Unmatched}
	for g, r := range prev.Reach {
		now[r] = out.Reach[g]
	}
	next := make(map[string]*Resources, len(memo))
	for k, r := range memo {
		if p, ok := now[r]; ok {
			r = p
		}
		next[k] = r
	}
	return next
}
