package model

import (
	"maps"
	"slices"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// Endpoint-only rebuilds (issue 40). A TTL check that flips on one
// instance changes the endpoints of the clusters made from its service and
// nothing else, yet Build walks the whole catalog: with thousands of
// services no proxy follows, a flip costs what the catalog costs. An
// EndpointIndex remembers, of the model one Build made, which clusters
// each Consul service's instances feed; Rebuild recomputes only those,
// with the very code Build uses (serviceClusters), and copies the rest.
//
// The rule, narrow on purpose because a wrong world is worse than a slow
// one: Rebuild takes a catalog only when it has the same services as the
// indexed one, every one either the same object or equal but for its
// instances' health (status, checks) and weights, and neither catalog has
// mesh data. Those fields feed endpoints' health and weight and nothing
// else Build derives: not a warning (those name addresses, ports and
// instance counts), not a subset or tag route (tags and meta), not a
// cluster's existence. Anything else (an instance that comes or goes, a
// changed address, tag or meta, a new policy, Connect data, whose
// sidecar clusters and gateways read health too) is built whole.

// EndpointIndex is where the endpoints of one Build's clusters come from.
// It is immutable once Build returns it.
type EndpointIndex struct {
	// cat and pol are what the model was built from (pol as the caller
	// passed it, nil included).
	cat *consul.Catalog
	pol *policy.Policy
	// feeds lists, by Consul service read, the services (policy names:
	// the base cluster's name) whose clusters read its instances.
	feeds map[consul.ServiceKey][]string
	// clashed are cluster names two things made: served with no
	// endpoints whatever the instances say (addCluster).
	clashed map[string]bool
	// copies maps a cluster to its proxyless copy, which has its
	// endpoints (proxylessCopies).
	copies map[string]string
}

// newEndpointIndex is the empty index of a Build of cat under pol.
func newEndpointIndex(cat *consul.Catalog, pol *policy.Policy) *EndpointIndex {
	return &EndpointIndex{cat: cat, pol: pol, feeds: map[consul.ServiceKey][]string{}, clashed: map[string]bool{}, copies: map[string]string{}}
}

// noteService records that service's clusters read the services in reads.
func (idx *EndpointIndex) noteService(service string, reads map[consul.ServiceKey]bool) {
	if idx == nil {
		return
	}
	for k := range reads {
		idx.feeds[k] = append(idx.feeds[k], service)
	}
}

// noteClash records that cluster is served with no endpoints.
func (idx *EndpointIndex) noteClash(cluster string) {
	if idx != nil {
		idx.clashed[cluster] = true
	}
}

// noteCopies records the proxyless copies Build added.
func (idx *EndpointIndex) noteCopies(copies []ir.Cluster) {
	if idx == nil {
		return
	}
	for _, c := range copies {
		idx.copies[strings.TrimPrefix(c.Name, ir.ProxylessClusterPrefix)] = c.Name
	}
}

// Rebuilt is what Rebuild returns.
type Rebuilt struct {
	// Model is what Build returns for the new catalog.
	Model *ir.Model
	// Clusters names, sorted, the clusters whose endpoints were
	// recomputed: every other cluster is the last model's, as are the
	// groups, listeners and secrets (the same slices).
	Clusters []string
	// Index is Model's index.
	Index *EndpointIndex
}

// Rebuild returns what Build(cat, pol) returns, given prev, the model
// whose index idx is; ok is false when cat and pol are not within the
// rule above, and the caller must Build. The warnings are prev's: nothing
// the rule lets change is in one. prev is not modified; the result shares
// everything with it but its cluster list, which holds prev's very
// clusters but for those whose endpoints changed.
func (idx *EndpointIndex) Rebuild(prev *ir.Model, cat *consul.Catalog, pol *policy.Policy) (Rebuilt, bool) {
	changed, ok := idx.healthOnlyChanges(cat, pol)
	if !ok || prev == nil {
		return Rebuilt{}, false
	}
	next := *idx
	next.cat = cat
	if len(changed) == 0 {
		return Rebuilt{Model: prev, Index: &next}, true
	}
	m := *prev
	m.Clusters = slices.Clone(prev.Clusters)
	var names []string
	// A builder with no index and no clusters: it only computes, and its
	// warnings are thrown away (they are prev's, see above).
	b := newBuilder(cat, idx.builtPolicy())
	for _, service := range idx.affected(changed) {
		for _, c := range b.serviceClusters(service) {
			if idx.clashed[c.Name] {
				continue
			}
			if !setEndpoints(m.Clusters, c.Name, c.Endpoints) {
				// Every cluster serviceClusters makes is in the model
				// unless it clashed; if not, the index is not this
				// model's, and only a Build knows the answer.
				return Rebuilt{}, false
			}
			names = append(names, c.Name)
			if cp, ok := idx.copies[c.Name]; ok {
				if !setEndpoints(m.Clusters, cp, c.Endpoints) {
					return Rebuilt{}, false
				}
				names = append(names, cp)
			}
		}
	}
	slices.Sort(names)
	return Rebuilt{Model: &m, Clusters: slices.Compact(names), Index: &next}, true
}

// builtPolicy is the policy Build used: a nil one mirrors the catalog.
func (idx *EndpointIndex) builtPolicy() *policy.Policy {
	if idx.pol == nil {
		return &policy.Policy{ExportAllServices: true, UnmatchedNodes: policy.UnmatchedAll}
	}
	return idx.pol
}

// healthOnlyChanges lists the services of cat that differ from the
// indexed catalog's, if every difference is within the rule.
func (idx *EndpointIndex) healthOnlyChanges(cat *consul.Catalog, pol *policy.Policy) ([]consul.ServiceKey, bool) {
	if idx == nil || pol != idx.pol || cat == nil || idx.cat == nil || cat.Mesh != nil || idx.cat.Mesh != nil {
		return nil, false
	}
	if len(cat.Services) != len(idx.cat.Services) {
		return nil, false
	}
	var changed []consul.ServiceKey
	for i, s := range cat.Services {
		old := idx.cat.Services[i]
		if s == old {
			continue
		}
		if !sameButHealth(old, s) {
			return nil, false
		}
		changed = append(changed, consul.ServiceKey{Datacenter: s.Datacenter, Name: s.Name})
	}
	return changed, true
}

// affected is every service whose clusters read one of changed, sorted.
func (idx *EndpointIndex) affected(changed []consul.ServiceKey) []string {
	set := map[string]bool{}
	for _, k := range changed {
		for _, s := range idx.feeds[k] {
			set[s] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// setEndpoints sets the endpoints of the cluster named name in clusters
// (sorted by name), reporting whether there is one.
func setEndpoints(clusters []*ir.Cluster, name string, eps []ir.Endpoint) bool {
	i, ok := slices.BinarySearchFunc(clusters, name, func(c *ir.Cluster, n string) int { return strings.Compare(c.Name, n) })
	if ok && !slices.Equal(clusters[i].Endpoints, eps) {
		// A new cluster: the old one stays the last model's, unchanged.
		c := *clusters[i]
		c.Endpoints = eps
		clusters[i] = &c
	}
	return ok
}

// sameButHealth reports whether a and b are the same service with the
// same instances, in the same order, differing at most in what the rule
// lets change: each instance's status, checks and weights.
func sameButHealth(a, b *consul.Service) bool {
	if a == nil || b == nil || a.Name != b.Name || a.Datacenter != b.Datacenter || len(a.Instances) != len(b.Instances) {
		return false
	}
	for i := range a.Instances {
		x, y := a.Instances[i], b.Instances[i]
		if x.ID != y.ID || x.Node != y.Node || x.Datacenter != y.Datacenter || x.Address != y.Address || x.Port != y.Port ||
			!slices.Equal(x.Tags, y.Tags) || !maps.Equal(x.Meta, y.Meta) || !maps.Equal(x.NodeMeta, y.NodeMeta) {
			return false
		}
	}
	return true
}

// ServicesFeeding returns, sorted, the Consul services whose instances
// feed the named clusters of m (the model Build indexed): a cluster of a
// policy service, its subsets and its proxyless copy read what that
// service reads. Clusters the index does not know (the mesh's) are left
// out.
func (idx *EndpointIndex) ServicesFeeding(m *ir.Model, clusters []string) []consul.ServiceKey {
	if idx == nil || m == nil || len(clusters) == 0 {
		return nil
	}
	reads := map[string][]consul.ServiceKey{} // policy service -> what it reads
	for k, services := range idx.feeds {
		for _, s := range services {
			reads[s] = append(reads[s], k)
		}
	}
	set := map[consul.ServiceKey]bool{}
	for _, name := range clusters {
		c := m.Cluster(name)
		if c == nil {
			continue
		}
		for _, s := range []string{c.Name, c.Service, strings.TrimPrefix(c.Name, ir.ProxylessClusterPrefix)} {
			for _, k := range reads[s] {
				set[k] = true
			}
		}
	}
	return slices.SortedFunc(maps.Keys(set), func(a, b consul.ServiceKey) int {
		return strings.Compare(a.Datacenter+"\x00"+a.Name, b.Datacenter+"\x00"+b.Name)
	})
}
