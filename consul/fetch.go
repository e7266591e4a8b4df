package consul

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/hashicorp/consul/api"
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
			keys[ServiceKey{Name: n}] = true
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
