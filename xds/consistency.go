package xds

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// The consistency check: what one proxy is served must refer only to what
// it is also served, or it waits forever (Envoy warms a cluster until its
// endpoints arrive, a listener until its routes and secrets do). The rules
// are go-control-plane's Snapshot.Consistent (every EDS cluster has its
// ClusterLoadAssignment and no assignment is unreferenced, the same for
// listeners and route configurations), extended to what it does not see:
// the route configurations of API listeners (proxyless gRPC) and the SDS
// secrets transport sockets name.
//
// It runs in Translate, once per group: a group whose resources fail it
// is reported in Output.Failed and keeps its last good state in serving,
// while every other group updates.

// ErrInconsistent marks resources that refer to resources not served with
// them, or are served without being referred to.
var ErrInconsistent = errors.New("inconsistent resources")

// Consistent checks the resources one proxy of a group gets: shared's
// clusters and endpoints, group's listeners and routes, and the secrets
// of both. group may be nil (a node in no group).
func Consistent(shared, group *Resources) error {
	return ConsistentExcept(shared, group, nil)
}

// ConsistentExcept is Consistent for a proxy that gets the secrets
// external names (Output.ExternalSecrets()) from someone else: the per-VM
// agent serves the mesh's leaves and roots from its local Consul agent.
// nil: every secret comes from the bridge.
func ConsistentExcept(shared, group *Resources, external func(string) bool) error {
	return errors.Join(sharedConsistent(shared, refsOf), groupConsistent(shared, clusterNameSet(shared), group, refsOf, external))
}

// references are what a cluster or listener names: the assignment an EDS
// cluster asks for, the route configurations of a listener's HTTP
// connection managers, the SDS secrets of its transport sockets. The
// Translator keeps them with the objects it reuses, so a translation
// unmarshals only what it built anew.
type references struct {
	eds     string // "" for a cluster that is not EDS, and for listeners
	rds     []string
	secrets []string
	// clusters a listener's filters call (access log collectors), or
	// an aggregate cluster sends to.
	clusters []string
	err      error
}

func refsOf(r types.Resource) references {
	var refs references
	switch r := r.(type) {
	case *clusterv3.Cluster:
		refs.eds, _ = edsName(r)
		refs.clusters, refs.err = aggregateMembers(r)
	case *listenerv3.Listener:
		refs.rds, refs.err = routeReferences(r)
		refs.clusters = listenerClusters(r)
	}
	secrets, err := SecretReferences(r)
	refs.secrets, refs.err = secrets, errors.Join(refs.err, err)
	return refs
}

// sharedConsistent checks what every proxy gets: the clusters with their
// endpoints and the secrets the clusters name.
func sharedConsistent(shared *Resources, ref func(types.Resource) references) error {
	var errs []error
	eds := make([]string, 0, len(shared.Clusters))
	served := make(map[string]bool, len(shared.Clusters))
	for _, c := range shared.Clusters {
		served[c.GetName()] = true
	}
	for _, c := range shared.Clusters {
		r := ref(c)
		if r.err != nil {
			errs = append(errs, fmt.Errorf("cluster %q: %w", c.GetName(), r.err))
		}
		if r.eds != "" {
			eds = append(eds, r.eds)
		}
		for _, m := range r.clusters {
			if !served[m] {
				errs = append(errs, fmt.Errorf("aggregate cluster %q sends to cluster %q, which is not served", c.GetName(), m))
			}
		}
	}
	errs = append(errs, sameNames("cluster", "endpoints", eds, names(shared.Endpoints)))
	// A mesh cluster's secrets are never shared ones: the caller's
	// group has them (central mesh; Translate checks each group's) or
	// the per-VM agent serves them.
	errs = append(errs, secretsServed(shared.Secrets, nil, shared.Clusters, ref, ir.IsMeshSecret))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInconsistent, err)
	}
	return nil
}

// groupConsistent checks a group's listeners against its routes, the
// clusters shared serves (sharedClusters: their names, made once per
// translation, not once per group) and the secrets served with them
// (shared's and the group's).
func groupConsistent(shared *Resources, sharedClusters map[string]bool, group *Resources, ref func(types.Resource) references, external func(string) bool) error {
	if group == nil {
		return nil
	}
	var errs []error
	var rds []string
	for _, l := range group.Listeners {
		r := ref(l)
		if r.err != nil {
			errs = append(errs, fmt.Errorf("listener %q: %w", l.GetName(), r.err))
		}
		rds = append(rds, r.rds...)
	}
	errs = append(errs, sameNames("listener", "route configuration", rds, names(group.Routes)))
	errs = append(errs, clustersServed(sharedClusters, group.Listeners, ref))
	errs = append(errs, secretsServed(shared.Secrets, group.Secrets, group.Listeners, ref, external))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInconsistent, err)
	}
	return nil
}

// ResourceName is the name a resource is served and referred to by.
func ResourceName(r types.Resource) string {
	switch r := r.(type) {
	case *endpointv3.ClusterLoadAssignment:
		return r.GetClusterName()
	case interface{ GetName() string }:
		return r.GetName()
	}
	return ""
}

func names[T types.Resource](items []T) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = ResourceName(it)
	}
	return out
}

// sameNames reports the referenced names that are missing and the served
// ones nothing refers to.
func sameNames(referrer, kind string, refs, have []string) error {
	slices.Sort(refs)
	refs = slices.Compact(refs)
	slices.Sort(have)
	var errs []error
	for _, r := range refs {
		if _, ok := slices.BinarySearch(have, r); !ok {
			errs = append(errs, fmt.Errorf("a %s refers to %s %q, which is not served", referrer, kind, r))
		}
	}
	for _, h := range have {
		if _, ok := slices.BinarySearch(refs, h); !ok {
			errs = append(errs, fmt.Errorf("%s %q is served but no %s refers to it", kind, h, referrer))
		}
	}
	return errors.Join(errs...)
}

// edsName is the ClusterLoadAssignment an EDS cluster asks for.
func edsName(c *clusterv3.Cluster) (string, bool) {
	if c.GetType() != clusterv3.Cluster_EDS {
		return "", false
	}
	if n := c.GetEdsClusterConfig().GetServiceName(); n != "" {
		return n, true
	}
	return c.GetName(), true
}

// routeReferences lists the RDS route configurations a listener's HTTP
// connection managers (in filter chains or as an API listener) name.
func routeReferences(l *listenerv3.Listener) ([]string, error) {
	var hcms []*hcmv3.HttpConnectionManager
	if api := l.GetApiListener().GetApiListener(); api != nil {
		h := &hcmv3.HttpConnectionManager{}
		if err := api.UnmarshalTo(h); err != nil {
			return nil, fmt.Errorf("API listener: %w", err)
		}
		hcms = append(hcms, h)
	}
	chains := slices.Clone(l.GetFilterChains())
	if d := l.GetDefaultFilterChain(); d != nil {
		chains = append(chains, d)
	}
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			if f.GetName() != wellknown.HTTPConnectionManager || f.GetTypedConfig() == nil {
				continue
			}
			h := &hcmv3.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
				return nil, fmt.Errorf("filter chain %q: %w", fc.GetName(), err)
			}
			hcms = append(hcms, h)
		}
	}
	var refs []string
	for _, h := range hcms {
		if rds := h.GetRds(); rds != nil && rds.GetConfigSource().GetAds() != nil {
			refs = append(refs, rds.GetRouteConfigName())
		}
	}
	return refs, nil
}

// secretsServed checks that every SDS secret the resources name is among
// the secrets served with them.
// Those external names are served by someone else (nil: none).
func secretsServed[R types.Resource](shared, own []*tlsv3.Secret, resources []R, ref func(types.Resource) references, external func(string) bool) error {
	have := map[string]bool{}
	for _, s := range shared {
		have[s.GetName()] = true
	}
	for _, s := range own {
		have[s.GetName()] = true
	}
	var missing []string
	for _, r := range resources {
		refs := ref(r)
		if len(refs.secrets) == 0 {
			continue
		}
		name := ResourceName(r)
		for _, s := range refs.secrets {
			if !have[s] && (external == nil || !external(s)) {
				missing = append(missing, fmt.Sprintf("%q refers to secret %q", name, s))
			}
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("missing SDS secrets: %s", strings.Join(missing, "; "))
	}
	return nil
}
