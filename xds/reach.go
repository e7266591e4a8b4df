package xds

import (
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Reach: the clusters, endpoints and upstream secrets one kind of node
// gets, as a Resources holding only those three. Each is a selection of
// Output.Shared's objects, never a copy, and groups whose cluster sets are
// equal share one Resources (and so, in serving, one marshalled set), so a
// fleet of sidecar groups costs one small slice per distinct set.

// proxylessReachKey is the Translator's memory of the proxyless clients'
// last good cluster set, beside the groups'.
const proxylessReachKey = "\x00proxyless"

// reachIndex finds the shared objects by name.
type reachIndex struct {
	clusters  map[string]memoCluster
	secrets   map[string]*tlsv3.Secret
	model     *ir.Model
	memo      map[string]*Resources // this translation's, by set key
	previous  map[string]*Resources // the last translation's
	noSecrets *Resources
}

// reach returns the Resources of the named clusters (sorted, served),
// with the secrets they use if withSecrets. The same set gets the same
// object within a translation, and last translation's object if every
// resource in it is the same.
func (x *reachIndex) reach(names []string, withSecrets bool) *Resources {
	key := strings.Join(names, "\x00")
	if withSecrets {
		key = "s\x00" + key
	}
	if r := x.memo[key]; r != nil {
		return r
	}
	r := &Resources{
		Clusters:  make([]*clusterv3.Cluster, 0, len(names)),
		Endpoints: make([]*endpointv3.ClusterLoadAssignment, 0, len(names)),
	}
	for _, n := range names {
		mc, ok := x.clusters[n]
		if !ok {
			continue
		}
		r.Clusters = append(r.Clusters, mc.cluster)
		if mc.endpoint != nil { // an ORIGINAL_DST cluster has none
			r.Endpoints = append(r.Endpoints, mc.endpoint)
		}
	}
	if withSecrets {
		for _, n := range x.model.SecretsOf(names) {
			if s := x.secrets[n]; s != nil {
				r.Secrets = append(r.Secrets, s)
			}
		}
	}
	if prev := x.previous[key]; prev != nil && sameObjects(prev, r) {
		r = prev // lets serving find the set unchanged by identity
	}
	x.memo[key] = r
	return r
}

func sameObjects(a, b *Resources) bool {
	return slices.Equal(a.Clusters, b.Clusters) && slices.Equal(a.Endpoints, b.Endpoints) && slices.Equal(a.Secrets, b.Secrets)
}

// union is a and b merged, sorted, without duplicates.
func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// translateReach fills out.Reach, out.ProxylessReach and out.Unmatched.
// A group that failed this time keeps the clusters it last had beside
// those it has now: its last good listeners may still route to them.
func (t *Translator) translateReach(m *ir.Model, out *Output, clusters map[string]memoCluster) {
	x := &reachIndex{clusters: clusters, secrets: map[string]*tlsv3.Secret{}, model: m, memo: map[string]*Resources{}, previous: t.reachMemo}
	for _, s := range out.Shared.Secrets {
		x.secrets[s.GetName()] = s
	}
	good := map[string][]string{}
	names := func(who string, now []string, failed bool) []string {
		if failed {
			now = union(t.goodReach[who], now)
		}
		good[who] = now
		return now
	}
	out.Reach = make(map[string]*Resources, len(m.Groups))
	for i := range m.Groups {
		g := &m.Groups[i]
		failed := out.Failed[g.Name] != nil
		// Proxyless clients get no secrets: gRPC's xDS client takes its
		// certificates from its bootstrap's certificate providers, not
		// from SDS, so serving them would only hand out keys.
		out.Reach[g.Name] = x.reach(names(g.Name, g.Clusters, failed), !g.Proxyless)
	}
	out.ProxylessReach = x.reach(names(proxylessReachKey, m.ProxylessClusters, out.ProxylessFailed != nil), false)
	out.Unmatched, out.UnmatchedNone = &Resources{}, !m.UnmatchedAll
	if m.UnmatchedAll {
		all := make([]string, 0, len(m.Clusters))
		sidecarOnly := m.SidecarClusters()
		for i := range m.Clusters {
			// A gRPC-only cluster an Envoy would reject; a sidecar's
			// cluster would never warm without its leaf.
			if c := m.Clusters[i]; !c.GRPCOnly() && !sidecarOnly[c.Name] {
				all = append(all, m.Clusters[i].Name)
			}
		}
		// Never a secret: a node in no group has proven nothing that
		// entitles it to a client key.
		out.Unmatched = x.reach(all, false)
	}
	t.reachMemo, t.goodReach = x.memo, good
}

// narrowProxyless is the part of the proxyless resources a proxyless
// group narrowed to targets gets.
func narrowProxyless(all *Resources, targets []string) *Resources {
	r := &Resources{}
	keep := func(name string) bool { _, ok := slices.BinarySearch(targets, name); return ok }
	for _, l := range all.Listeners {
		if keep(l.GetName()) {
			r.Listeners = append(r.Listeners, l)
		}
	}
	for _, rc := range all.Routes {
		if keep(rc.GetName()) {
			r.Routes = append(r.Routes, rc)
		}
	}
	for k, v := range all.RouteSources {
		if name, _, _ := strings.Cut(k, "/"); keep(name) {
			if r.RouteSources == nil {
				r.RouteSources = map[string]string{}
			}
			r.RouteSources[k] = v
		}
	}
	return r
}
