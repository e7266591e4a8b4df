package consul

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
)

// Config configures a Watcher.
type Config struct {
	// Client talks to the Consul agent.
	Client *api.Client
	// Query tunes every blocking query (datacenter, stale, wait, backoff).
	Query QueryOptions
	// Want selects which catalog services get a health watch; nil selects
	// all. Services that are not wanted never appear in a Catalog.
	Want func(name string) bool
	// Logger receives one event per query failure, recovery and index reset.
	Logger zerolog.Logger
	// OnQuery, if set, is told the outcome of every Consul request, by
	// endpoint ("catalog_services", "health_service"). It must not block.
	OnQuery func(endpoint string, err error, d time.Duration)
}

// Update is one catalog snapshot handed to the consumer.
type Update struct {
	Catalog *Catalog
	// Complete is true once the service list and every wanted service's
	// health have been read at least once: before that the catalog is
	// partial and must not be served.
	Complete bool
	// ChangedAt is when the oldest Consul response folded into this update
	// returned, so consumers can measure change-to-push latency.
	ChangedAt time.Time
}

// Watcher keeps one blocking query on the service list and one per wanted
// service, and publishes a new Catalog whenever any of them changes.
type Watcher struct {
	cfg     Config
	updates chan Update
}

// NewWatcher returns a Watcher; nothing runs until Run.
func NewWatcher(cfg Config) *Watcher {
	return &Watcher{cfg: cfg, updates: make(chan Update, 1)}
}

// Updates delivers catalog snapshots. Only the newest unread one is kept:
// a slow consumer skips intermediate states but never sees them out of order.
func (w *Watcher) Updates() <-chan Update { return w.updates }

// event is what the view goroutines send to Run, the only owner of state.
type event struct {
	services []string // catalog service list, when service == ""
	service  string
	gen      uint64 // which health watch of service sent it
	health   *Service
	at       time.Time
}

type healthWatch struct {
	gen    uint64
	cancel context.CancelFunc
	data   *Service // nil until the first response
}

// Run watches until ctx ends. Consul errors never end it: views back off and
// keep the last good data, so an outage never turns into empty services.
func (w *Watcher) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	log := w.cfg.Logger
	events := make(chan event)
	send := func(ctx context.Context, ev event) {
		select {
		case events <- ev:
		case <-ctx.Done():
		}
	}

	catalog := view[[]string]{
		id: "catalog_services",
		fetch: func(q *api.QueryOptions) ([]string, *api.QueryMeta, error) {
			m, meta, err := w.cfg.Client.Catalog().Services(q)
			return slices.Sorted(maps.Keys(m)), meta, err
		},
		equal:  slices.Equal[[]string],
		opts:   w.cfg.Query,
		log:    log,
		result: w.resultFunc("catalog_services"),
	}
	wg.Go(func() {
		catalog.run(ctx, func(names []string, _ uint64, at time.Time) {
			send(ctx, event{services: names, at: at})
		})
	})

	var (
		watches     = map[string]*healthWatch{}
		gen         uint64
		listLoaded  bool
		pendingFrom time.Time
	)
	startHealth := func(name string) {
		gen++
		hctx, hcancel := context.WithCancel(ctx)
		hw := &healthWatch{gen: gen, cancel: hcancel}
		watches[name] = hw
		v := view[*Service]{
			id: "health(" + name + ")",
			fetch: func(q *api.QueryOptions) (*Service, *api.QueryMeta, error) {
				entries, meta, err := w.cfg.Client.Health().Service(name, "", false, q)
				if err != nil || meta == nil {
					return nil, meta, err
				}
				return NewService(name, w.cfg.Query.Datacenter, meta.LastIndex, entries), meta, nil
			},
			equal:  equalService,
			opts:   w.cfg.Query,
			log:    log,
			result: w.resultFunc("health_service"),
		}
		myGen := gen
		wg.Go(func() {
			v.run(hctx, func(s *Service, _ uint64, at time.Time) {
				send(hctx, event{service: name, gen: myGen, health: s, at: at})
			})
		})
	}

	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			if pendingFrom.IsZero() || ev.at.Before(pendingFrom) {
				pendingFrom = ev.at
			}
			if ev.service == "" {
				listLoaded = true
				wanted := map[string]bool{}
				for _, n := range ev.services {
					if w.cfg.Want == nil || w.cfg.Want(n) {
						wanted[n] = true
					}
				}
				for name, hw := range watches {
					if !wanted[name] {
						hw.cancel()
						delete(watches, name)
						log.Debug().Str("service", name).Msg("service gone; stopped its health watch")
					}
				}
				for _, name := range slices.Sorted(maps.Keys(wanted)) {
					if watches[name] == nil {
						startHealth(name)
						log.Debug().Str("service", name).Msg("started health watch")
					}
				}
			} else if hw := watches[ev.service]; hw != nil && hw.gen == ev.gen {
				hw.data = ev.health
			} else {
				continue // a stopped watch's last word
			}
			w.publish(watches, listLoaded, pendingFrom)
			pendingFrom = time.Time{}
		}
	}
}

func (w *Watcher) publish(watches map[string]*healthWatch, listLoaded bool, at time.Time) {
	complete := listLoaded
	services := make([]*Service, 0, len(watches))
	for _, hw := range watches {
		if hw.data == nil {
			// Not yet read: leave it out rather than serve it empty.
			complete = false
			continue
		}
		services = append(services, hw.data)
	}
	u := Update{Catalog: NewCatalog(services), Complete: complete, ChangedAt: at}
	select {
	case old := <-w.updates:
		if old.ChangedAt.Before(u.ChangedAt) {
			u.ChangedAt = old.ChangedAt
		}
	default:
	}
	w.updates <- u
}

func (w *Watcher) resultFunc(endpoint string) func(error, time.Duration) {
	if w.cfg.OnQuery == nil {
		return nil
	}
	return func(err error, d time.Duration) { w.cfg.OnQuery(endpoint, err, d) }
}
