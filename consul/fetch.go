package consul

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// FetchCatalog reads the targets once, without blocking queries, for
// one-shot commands such as `plan` that need the catalog as it is now.
// Any failed read is an error: a partial catalog would make a plan lie.
func FetchCatalog(ctx context.Context, client *api.Client, targets Targets, q QueryOptions) (*Catalog, error) {
	opts := func(dc string) *api.QueryOptions {
		if dc == "" {
			dc = q.Datacenter
		}
		return (&api.QueryOptions{Datacenter: dc, AllowStale: q.Stale}).WithContext(ctx)
	}
	keys := map[ServiceKey]bool{}
	for _, k := range targets.Services {
		keys[k] = true
	}
	if targets.AllLocal {
		names, _, err := client.Catalog().Services(opts(""))
		if err != nil {
			return nil, fmt.Errorf("list services: %w", err)
		}
		for n := range names {
			// Left out as the watcher leaves them out (reconcile): the
			// plan must read the catalog the bridge serves from.
			if ir.QueryableServiceName(n) {
				keys[ServiceKey{Name: n}] = true
			}
		}
	}
	services := make([]*Service, 0, len(keys))
	for _, k := range slices.SortedFunc(maps.Keys(keys), compareKeys) {
		entries, meta, err := client.Health().Service(k.Name, "", false, opts(k.Datacenter))
		if err != nil {
			return nil, fmt.Errorf("health of %s: %w", k, err)
		}
		services = append(services, NewService(k.Name, k.Datacenter, meta.LastIndex, entries))
	}
	return NewCatalog(services), nil
}

// FetchKV reads the policy documents under prefix once, without blocking,
// normalised and limited as the KV watcher does, for one-shot commands
// (`plan`) that must see the policy the running bridge merges.
func FetchKV(ctx context.Context, client *api.Client, prefix string, q QueryOptions) (*KVUpdate, error) {
	if prefix == "" {
		return nil, fmt.Errorf("consul kv: empty prefix")
	}
	w := NewKVWatcher(KVConfig{Client: client, Prefix: prefix, Query: q})
	pairs, meta, err := client.KV().List(prefix, (&api.QueryOptions{Datacenter: q.Datacenter, AllowStale: q.Stale}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("kv %q: %w", prefix, err)
	}
	s := w.normalise(pairs)
	return &KVUpdate{Documents: s.docs, Rejected: s.rejected, Index: meta.LastIndex}, nil
}

// FetchMesh reads Consul Connect once, without blocking, as the mesh
// watcher's first publication has it (leaves in central mode) with the
// intentions and protocols the daemon joins from config entries, for
// one-shot commands such as `plan`. Other datacenters' connect health is
// left out, as the watcher does until they answer. Any failed local read
// is an error. targets are the services whose connect health is read
// besides the registrations' upstreams, as MeshConfig.Targets.
func FetchMesh(ctx context.Context, client *api.Client, central bool, q QueryOptions, targets []ServiceKey) (*Mesh, error) {
	opts := func(dc string) *api.QueryOptions {
		return (&api.QueryOptions{Datacenter: cmp.Or(dc, q.Datacenter), AllowStale: q.Stale, Filter: ""}).WithContext(ctx)
	}
	lq := opts("")
	lq.Filter = proxyFilter
	names, _, err := client.Catalog().Services(lq)
	if err != nil {
		return nil, fmt.Errorf("list connect proxies: %w", err)
	}
	nq := opts("")
	nq.Filter = nativeFilter
	natives, _, err := client.Catalog().Services(nq)
	if err != nil {
		return nil, fmt.Errorf("list Connect-native services: %w", err)
	}
	m := &Mesh{Endpoints: map[string][]Proxy{}, Natives: slices.Sorted(maps.Keys(natives))}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		entries, _, err := client.Health().Service(n, "", false, opts(""))
		if err != nil {
			return nil, fmt.Errorf("health of %s: %w", n, err)
		}
		m.Proxies = append(m.Proxies, NewProxies(entries)...)
	}
	slices.SortFunc(m.Proxies, func(a, b Proxy) int { return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID)) })
	roots, _, err := client.Connect().CARoots(opts(""))
	if err != nil {
		return nil, fmt.Errorf("connect CA roots: %w", err)
	}
	m.TrustDomain, m.RootsPEM = roots.TrustDomain, rootsPEM(roots)
	self, err := client.Agent().Self()
	var se api.StatusError
	switch {
	case err == nil:
		m.DefaultIntention = aclDefault(self)
	case errors.As(err, &se) && se.Code == http.StatusForbidden:
		m.DefaultIntention = ir.IntentionDeny
	default:
		return nil, fmt.Errorf("agent ACL settings: %w", err)
	}
	var all []api.ConfigEntry
	for _, kind := range []string{api.ServiceIntentions, api.ServiceDefaults, api.MeshConfig, api.TerminatingGateway, api.ProxyDefaults} {
		entries, _, err := client.ConfigEntries().List(kind, opts(""))
		if err != nil {
			return nil, fmt.Errorf("config entries %s: %w", kind, err)
		}
		all = append(all, entries...)
	}
	m.SetEntries(fetchWildcards(ctx, client, all, opts("")))
	// After the entries: a mesh gateway routes to the services linked to
	// terminating gateways too (MeshGatewayTargets).
	targets = append(slices.Clone(targets), m.MeshGatewayTargets()...)
	for _, k := range m.upstreams(targets...) {
		entries, _, err := client.Health().Connect(k.Name, "", false, opts(k.Datacenter))
		if err != nil {
			if k.Datacenter != "" {
				continue
			}
			return nil, fmt.Errorf("connect health of %s: %w", k, err)
		}
		m.Endpoints[k.String()] = newConnectEndpoints(entries)
	}
	for _, dc := range m.gatewayDatacenters(targets...) {
		// As the watcher: a datacenter that does not answer is absent.
		if gws, err := fetchRemoteGateways(ctx, client, dc, q.Stale); err == nil {
			if m.RemoteGateways == nil {
				m.RemoteGateways = map[string][]Proxy{}
			}
			m.RemoteGateways[dc] = gws
		}
	}
	if central {
		m.Leaves = map[string]Leaf{}
		var services []string
		for _, p := range m.Proxies {
			if !p.IsGateway() {
				services = append(services, p.Service)
			}
		}
		for _, s := range append(services, m.LinkedServices()...) {
			if _, ok := m.Leaves[s]; ok {
				continue
			}
			l, _, err := client.Agent().ConnectCALeaf(s, (&api.QueryOptions{}).WithContext(ctx))
			if err != nil {
				return nil, fmt.Errorf("leaf of %s: %w", s, err)
			}
			m.Leaves[s] = Leaf{CertPEM: l.CertPEM, KeyPEM: ir.Redacted(l.PrivateKeyPEM), ServiceURI: l.ServiceURI, ValidBefore: l.ValidBefore}
		}
	}
	return m, nil
}

// FetchConfigEntries lists the config entries of kinds once, without
// blocking, in the order the config-entry watcher publishes them (by
// kind, then as Consul lists them), for one-shot commands (`plan`) that
// must see the entries a running bridge with consul.config_entries merges
// into its policy. Any failed read is an error: a plan without some of
// the entries would show their routes as removed.
func FetchConfigEntries(ctx context.Context, client *api.Client, kinds []string, q QueryOptions) ([]api.ConfigEntry, error) {
	var all []api.ConfigEntry
	for _, kind := range kinds {
		entries, _, err := client.ConfigEntries().List(kind, (&api.QueryOptions{Datacenter: q.Datacenter, AllowStale: q.Stale}).WithContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("config entries %s: %w", kind, err)
		}
		all = append(all, entries...)
	}
	return all, nil
}
