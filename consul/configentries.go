package consul

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
)

// ConfigEntriesConfig configures a ConfigEntriesWatcher.
type ConfigEntriesConfig struct {
	Client *api.Client
	// Kinds are the config entry kinds to follow.
	Kinds   []string
	Query   QueryOptions
	Logger  zerolog.Logger
	OnQuery func(endpoint, datacenter string, err error, d time.Duration)
}

// ConfigEntriesUpdate is every followed entry, once each kind has been
// read at least once (never a partial set at start), then on each change.
type ConfigEntriesUpdate struct {
	Entries   []api.ConfigEntry
	ChangedAt time.Time
}

// ConfigEntriesWatcher follows config entries with one blocking query per
// kind (GET /v1/config/KIND).
type ConfigEntriesWatcher struct {
	cfg     ConfigEntriesConfig
	updates chan ConfigEntriesUpdate
}

// NewConfigEntriesWatcher returns a watcher; Run starts it.
func NewConfigEntriesWatcher(cfg ConfigEntriesConfig) *ConfigEntriesWatcher {
	return &ConfigEntriesWatcher{cfg: cfg, updates: make(chan ConfigEntriesUpdate, 1)}
}

// Updates delivers the latest set; an unread one is replaced.
func (w *ConfigEntriesWatcher) Updates() <-chan ConfigEntriesUpdate { return w.updates }

// Run follows the entries until ctx ends.
func (w *ConfigEntriesWatcher) Run(ctx context.Context) error {
	var (
		mu   sync.Mutex
		have = map[string][]api.ConfigEntry{}
		// links are Consul's expansions of wildcard terminating-gateway
		// links (wildcard.go), followed while an entry has one.
		links     = map[string][]*api.GatewayService{}
		expanding = map[string]context.CancelFunc{}
		wg        sync.WaitGroup
	)
	// publish hands on every entry once each kind has been read; mu held.
	publish := func(at time.Time) {
		if len(have) < len(w.cfg.Kinds) {
			return // not every kind read yet
		}
		var all []api.ConfigEntry
		for _, k := range w.cfg.Kinds {
			all = append(all, have[k]...)
		}
		publishLatest(w.updates, ConfigEntriesUpdate{Entries: expandWildcards(all, links), ChangedAt: at},
			func(u *ConfigEntriesUpdate) *time.Time { return &u.ChangedAt })
	}
	// expand follows the expansion of each wildcard gateway, and no
	// other; mu held.
	expand := func() {
		want := wildcardGateways(have[api.TerminatingGateway])
		for name, cancel := range expanding {
			if !slices.Contains(want, name) {
				cancel()
				delete(expanding, name)
				delete(links, name)
			}
		}
		for _, name := range want {
			if expanding[name] != nil {
				continue
			}
			gctx, cancel := context.WithCancel(ctx)
			expanding[name] = cancel
			v := w.gatewayServicesView(name)
			wg.Go(func() {
				v.run(gctx, func(gs []*api.GatewayService, _ uint64, at time.Time) {
					mu.Lock()
					defer mu.Unlock()
					if gctx.Err() != nil {
						return // no longer a wildcard gateway
					}
					links[name] = gs
					publish(at)
				})
			})
		}
	}
	for _, kind := range w.cfg.Kinds {
		v := view[[]api.ConfigEntry]{
			id: "config(" + kind + ")",
			fetch: func(q *api.QueryOptions) ([]api.ConfigEntry, *api.QueryMeta, error) {
				return w.cfg.Client.ConfigEntries().List(kind, q)
			},
			equal: sameEntries,
			opts:  w.cfg.Query,
			log:   w.cfg.Logger,
		}
		if w.cfg.OnQuery != nil {
			v.result = func(err error, d time.Duration) { w.cfg.OnQuery("config_entries", "", err, d) }
		}
		wg.Go(func() {
			v.run(ctx, func(entries []api.ConfigEntry, _ uint64, at time.Time) {
				mu.Lock()
				defer mu.Unlock()
				have[kind] = entries
				if kind == api.TerminatingGateway {
					expand()
				}
				publish(at)
			})
		})
	}
	wg.Wait()
	return nil
}

// sameEntries compares two lists by their encoding. An entry rewritten
// with the same content (a new ModifyIndex) counts as a change; the
// policy made from it is then the same, parsed from the loop's cache.
func sameEntries(a, b []api.ConfigEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, _ := json.Marshal(a[i])
		y, _ := json.Marshal(b[i])
		if string(x) != string(y) {
			return false
		}
	}
	return true
}
