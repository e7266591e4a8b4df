package consul

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
)

// Config configures a Watcher.
type Config struct {
	// Client talks to the Consul agent.
	Client *api.Client
	// Query tunes every blocking query (datacenter, stale, wait, backoff).
	// Query.Datacenter, or the agent's own if empty, is the local datacenter.
	Query QueryOptions
	// Targets is the initial set of services to watch; [Watcher.SetTargets]
	// replaces it while running. The zero value watches only the service
	// list, so set AllLocal to watch every registered service.
	Targets Targets
	// MaxQueries caps the watcher's concurrent requests to Consul, and so
	// its connections to the agent; zero means no bound (a slot per
	// watched service), and the least is 2. It must stay below the client's MaxConns
	// ([ClientConfig.MaxConns]), which must stay below the agent's
	// limits.http_max_conns_per_client (200 by default, counted over every
	// client on the host): otherwise requests queue inside the HTTP
	// transport, where their timeouts run, or the agent refuses them with
	// 429. Watching more services than there are slots works (see
	// [Watcher.QueryStats]): the services take turns, each blocking for a
	// shortened wait, and health changes are still seen at once through
	// queries on the local datacenter's critical and warning checks (one
	// query filtered to the checks not passing, under 4 slots; hintStates).
	// Those queries keep a slot each, and while the services take turns
	// one more is left free for the services they hurry. The service-list query is not
	// counted: it runs beside the slots, on a connection of its own.
	MaxQueries int
	// Logger receives one event per query failure, recovery, index reset,
	// started or stopped health watch, and change of oversubscription.
	Logger zerolog.Logger
	// OnQuery, if set, is told the outcome of every Consul request, by
	// endpoint ("catalog_services", "health_service", "health_state") and
	// datacenter ("" for the local one, else the remote datacenter a
	// service is read from). It must not block.
	OnQuery func(endpoint, datacenter string, err error, d time.Duration)
}

// Targets says which services to watch. Routing policy decides it, so it
// changes at run time; see [Watcher.SetTargets].
type Targets struct {
	// AllLocal watches every service in the local catalog (export_all_services).
	// A service that leaves the catalog list stops being watched unless it is
	// also in Services.
	AllLocal bool
	// Services are watched whether or not the catalog lists them yet (a
	// policy may reference a service before it registers): an unregistered
	// local service appears in the Catalog with no instances.
	Services []ServiceKey
}

// ServiceKey names one service in one datacenter; Datacenter "" is the
// local one. A target is in the Catalog under exactly its key, so a key
// that names the local datacenter explicitly is a separate entry (and
// watch) from the same service under "".
type ServiceKey struct{ Datacenter, Name string }

// String is "name" for the local datacenter and "name@dc" otherwise, for logs.
func (k ServiceKey) String() string {
	if k.Datacenter == "" {
		return k.Name
	}
	return k.Name + "@" + k.Datacenter
}

func compareKeys(a, b ServiceKey) int {
	return cmp.Or(cmp.Compare(a.Datacenter, b.Datacenter), cmp.Compare(a.Name, b.Name))
}

// normalise sorts and deduplicates the targets and drops nameless ones, so
// that equal sets compare equal and the caller's slice is not shared.
func (t Targets) normalise() Targets {
	out := Targets{AllLocal: t.AllLocal, Services: make([]ServiceKey, 0, len(t.Services))}
	for _, k := range t.Services {
		if k.Name != "" {
			out.Services = append(out.Services, k)
		}
	}
	slices.SortFunc(out.Services, compareKeys)
	out.Services = slices.Compact(out.Services)
	return out
}

// Update is one catalog snapshot handed to the consumer.
type Update struct {
	// Catalog holds every target that has been read at least once, each
	// under its ServiceKey: Catalog.Service(key.Datacenter, key.Name).
	Catalog *Catalog
	// Complete is true when the service list and every target have been
	// read at least once. Before the first complete update the catalog is
	// partial and must not be served. After it, an incomplete update only
	// lacks targets added since (by SetTargets, or by a new registration
	// under AllLocal) and never read, listed in Pending: everything else in
	// it is current or last-good data, so a consumer already serving can go
	// on serving it.
	Complete bool
	// Pending lists, sorted, the targets whose health has never been read.
	// It may be empty while Complete is false: until the service list has
	// been read, the services AllLocal stands for are not known.
	Pending []ServiceKey
	// Unreachable lists, sorted, the remote-datacenter targets that have
	// never been read because their datacenter answers with errors (a key
	// naming Query.Datacenter is local, and is never listed here). Each
	// is in Catalog with no instances and counts as read for Complete, so
	// one unreachable datacenter cannot hold back every other service.
	// Once read, a target leaves this list: later errors keep its last
	// good data, as for any service.
	Unreachable []ServiceKey
	// Skipped lists, sorted, the catalog services left out under AllLocal
	// because their names cannot be queried or be cluster names (see
	// ir.QueryableServiceName); they never hold Complete back.
	Skipped []string
	// ChangedAt is when the oldest Consul response folded into this update
	// returned (or when the targets changed), so consumers can measure
	// change-to-push latency.
	ChangedAt time.Time
	// Changed is what this update changed since the previous one the
	// consumer took (see Change): a health flip names its service and
	// says it touched only endpoints.
	Changed Change
}

// Watcher keeps one blocking query on the service list and one per target
// service, and publishes a new Catalog whenever any of them changes. The
// queries share Config.MaxQueries slots; while they take turns, blocking
// queries on the local datacenter's critical and warning checks tell a
// service's query to go ahead of the others when its health changes.
type Watcher struct {
	cfg     Config
	updates chan Update
	slots   *budget

	mu      sync.Mutex
	targets Targets // normalised; replaced, never mutated
	// followed are the services a connected proxy follows (SetFollowed);
	// replaced, never mutated.
	followed map[ServiceKey]bool
	// retarget holds at most one "targets changed" signal for Run. Signals
	// sent while one is pending merge into it, which loses nothing because
	// Run then reads the newest targets.
	retarget chan struct{}
	// skipped is the latest list of catalog services left out for their
	// names (ir.QueryableServiceName), for Update.Skipped.
	skipped atomic.Pointer[[]string]
	// last is the last update published (publish.go); Run's own.
	last *lastPublish
}

// NewWatcher returns a Watcher; nothing runs until Run.
func NewWatcher(cfg Config) *Watcher {
	return &Watcher{
		cfg:      cfg,
		updates:  make(chan Update, 1),
		slots:    newBudget(cfg.MaxQueries, cfg.Query.withDefaults().WaitTime, cfg.Logger),
		targets:  cfg.Targets.normalise(),
		retarget: make(chan struct{}, 1),
	}
}

// Updates delivers catalog snapshots. Only the newest unread one is kept:
// a slow consumer skips intermediate states but never sees them out of order.
func (w *Watcher) Updates() <-chan Update { return w.updates }

// SetTargets replaces the set of watched services. It is safe from any
// goroutine, before or during Run, and never blocks; Run starts the missing
// health watches and stops the ones no longer wanted. Setting the same
// targets again does nothing, so callers may call it on every policy reload.
func (w *Watcher) SetTargets(t Targets) {
	t = t.normalise()
	w.mu.Lock()
	w.targets = t
	w.mu.Unlock()
	signal(w.retarget)
}

// QueryStats returns the watcher's query slots, how many of them requests
// hold now, and how many queries wait for one. Waiting queries mean the
// watcher is oversubscribed: each service is then re-read in turn, about
// once per wait time. It is safe from any goroutine.
func (w *Watcher) QueryStats() (slots, inUse, waiting int) {
	return w.slots.stats()
}

// signal leaves a wake-up in ch (a channel of capacity 1) unless one is
// already pending: the receiver then reads the newest state, so merging
// signals loses nothing.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (w *Watcher) currentTargets() Targets {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.targets
}

// event is what the view goroutines send to Run, the only owner of state.
type event struct {
	list     bool
	services []string // the catalog service list, when list
	key      ServiceKey
	gen      uint64 // which health watch of key sent it
	health   *Service
	err      error // a failed health query, from remote watches only
	hints    *hintPokes
	at       time.Time
}

type healthWatch struct {
	gen    uint64
	cancel context.CancelFunc
	slots  *member
	data   *Service // nil until the first response
	// unreachable marks data as a stand-in for a remote service whose
	// datacenter has never answered.
	unreachable bool
}

// Run watches until ctx ends. Consul errors never end it: views back off and
// keep the last good data, so an outage never turns into empty services.
func (w *Watcher) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	w.slots.setQuiet(false)
	defer w.slots.setQuiet(true)
	w.last = nil // a new run's watches start over

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
		result: w.resultFunc("catalog_services", ""),
		// The service list is outside the budget, on a connection of its
		// own: a registration must start its service's watch at once,
		// not when the list's turn comes round.
	}
	wg.Go(func() {
		catalog.run(ctx, func(names []string, _ uint64, at time.Time) {
			send(ctx, event{list: true, services: names, at: at})
		})
	})

	var (
		watches    = map[ServiceKey]*healthWatch{}
		gen        uint64
		list       []string
		listLoaded bool
		targets    = w.currentTargets()
		stopHints  func() // nil while no hint view runs
	)
	startHealth := func(key ServiceKey) {
		gen++
		hctx, hcancel := context.WithCancel(ctx)
		hw := &healthWatch{gen: gen, cancel: hcancel}
		watches[key] = hw
		opts := w.cfg.Query
		if key.Datacenter != "" {
			opts.Datacenter = key.Datacenter
		}
		myGen := gen
		v := view[*Service]{
			id: "health(" + key.String() + ")",
			fetch: func(q *api.QueryOptions) (*Service, *api.QueryMeta, error) {
				q.UseCache = w.cfg.Query.UseCache && w.isLocal(key)
				entries, meta, err := w.cfg.Client.Health().Service(key.Name, "", false, q)
				if err != nil || meta == nil {
					return nil, meta, err
				}
				return NewService(key.Name, key.Datacenter, meta.LastIndex, entries), meta, nil
			},
			equal:  equalService,
			opts:   opts,
			log:    log,
			result: w.resultFunc("health_service", w.remoteDatacenter(key)),
		}
		v.slots = w.slots.join(v.id, false)
		v.slots.setFollowed(w.currentFollowed()[key])
		hw.slots = v.slots
		if !w.isLocal(key) {
			v.failed = func(err error) {
				send(hctx, event{key: key, gen: myGen, err: err, at: time.Now()})
			}
		}
		wg.Go(func() {
			defer v.slots.leave()
			v.run(hctx, func(s *Service, _ uint64, at time.Time) {
				send(hctx, event{key: key, gen: myGen, health: s, at: at})
			})
		})
	}
	startHints := func() {
		var stops []func()
		for _, state := range hintStates(w.slots.slots) {
			hctx, hcancel := context.WithCancel(ctx)
			v := w.hintView(state, hcancel)
			v.slots = w.slots.join(v.id, true)
			stops = append(stops, func() {
				hcancel()
				v.slots.leave()
			})
			wg.Go(func() {
				defer v.slots.leave()
				var prev hintSet
				v.run(hctx, func(cur hintSet, index uint64, _ time.Time) {
					// The first response is only the baseline: with nothing to
					// compare it to, it cannot tell what changed.
					if prev == nil {
						prev = cur
						return
					}
					p := diffHints(prev, cur, index)
					prev = cur
					if !p.empty() {
						send(hctx, event{hints: &p})
					}
				})
			})
		}
		stopHints = func() {
			for _, stop := range stops {
				stop()
			}
		}
	}
	// reconcile makes the running health watches match the targets and the
	// service list, reporting whether it started or stopped any.
	reconcile := func() bool {
		want := make(map[ServiceKey]bool, len(targets.Services)+len(list))
		for _, k := range targets.Services {
			want[k] = true
		}
		if targets.AllLocal {
			var skipped []string
			for _, n := range list {
				if !ir.QueryableServiceName(n) {
					skipped = append(skipped, n)
					continue
				}
				want[ServiceKey{Name: n}] = true
			}
			if prev := w.skipped.Swap(&skipped); len(skipped) > 0 && (prev == nil || !slices.Equal(*prev, skipped)) {
				log.Warn().Strs("services", skipped).Msg("Consul services skipped: their names cannot be queried or be cluster names")
			}
		}
		changed := false
		// Joins and leaves are batched so that a new target set is judged
		// oversubscribed or not once, not after each view.
		defer w.slots.batch()()
		for k, hw := range watches {
			if !want[k] {
				hw.cancel()
				hw.slots.leave()
				delete(watches, k)
				changed = true
				log.Debug().Str("service", k.Name).Str("datacenter", k.Datacenter).Msg("stopped health watch")
			}
		}
		for _, k := range slices.SortedFunc(maps.Keys(want), compareKeys) {
			if watches[k] == nil {
				startHealth(k)
				changed = true
				log.Debug().Str("service", k.Name).Str("datacenter", k.Datacenter).Msg("started health watch")
			}
		}
		followed := w.currentFollowed()
		for k, hw := range watches {
			hw.slots.setFollowed(followed[k])
		}
		// Hints only hurry local health views that wait for a slot, so
		// they cost a slot and a query per change only while there are
		// such views: when every view has a slot of its own (the hint
		// view's included), each sees its changes by itself.
		local := false
		for k := range watches {
			local = local || w.isLocal(k)
		}
		need := local && w.slots.oversubscribedWith(len(watches))
		switch {
		case need && stopHints == nil:
			startHints()
		case !need && stopHints != nil:
			stopHints()
			stopHints = nil
		}
		return changed
	}
	reconcile()

	// handle folds one event into the watches, reporting whether the
	// consumer has news and what it changed.
	handle := func(ev event) (bool, Change) {
		if ev.hints != nil {
			w.poke(watches, ev.hints)
			return false, Change{}
		}
		if ev.list {
			first := !listLoaded
			list, listLoaded = ev.services, true
			// Without AllLocal the list only matters for completeness,
			// so its changes alone are no news to the consumer.
			return reconcile() || first, Change{}
		}
		hw := watches[ev.key]
		if hw == nil || hw.gen != ev.gen {
			return false, Change{} // a stopped watch's last word
		}
		if ev.err != nil {
			if hw.data != nil || !answeredError(ev.err) {
				return false, Change{}
			}
			hw.data = &Service{Name: ev.key.Name, Datacenter: ev.key.Datacenter, Instances: []Instance{}}
			hw.unreachable = true
			log.Warn().Err(ev.err).Str("service", ev.key.Name).Str("datacenter", ev.key.Datacenter).
				Msg("remote datacenter unreachable; serving the service as empty until it answers")
			return true, Change{}
		}
		// A target read before, and read again: only its instances and
		// their health can differ. A first read adds a service.
		ch := Change{}
		if hw.data != nil && !hw.unreachable {
			ch = endpointChange(ev.key)
		}
		hw.data, hw.unreachable = ev.health, false
		return true, ch
	}

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.retarget:
			targets = w.currentTargets()
			if reconcile() {
				w.publish(watches, listLoaded, time.Now(), Change{})
			}
		case ev := <-events:
			// Events that are already waiting (a burst of changes, the
			// first reads of a thousand services) go into one catalog:
			// building and sorting one per event would be thrown away by
			// the consumer, which reads only the newest.
			// Bounded, so a steady stream still publishes.
			var (
				at     time.Time
				pub    bool
				change Change
			)
			for n := 0; ; n++ {
				if news, ch := handle(ev); news {
					if !pub {
						at, pub, change = ev.at, true, ch
					} else {
						at, change = minTime(at, ev.at), change.Merge(ch)
					}
				}
				if n == maxBatch {
					break
				}
				select {
				case ev = <-events:
					continue
				default:
				}
				break
			}
			if pub {
				w.publish(watches, listLoaded, at, change)
			}
		}
	}
}

// maxBatch bounds how many waiting events go into one published catalog.
const maxBatch = 1024

func (w *Watcher) isLocal(k ServiceKey) bool {
	return k.Datacenter == "" || k.Datacenter == w.cfg.Query.Datacenter
}

// hintView builds the view on the local datacenter's checks in state
// (hintStates): "critical" or "warning", or "any" filtered to those not
// passing. stop ends it for good when the agent rejects the query.
func (w *Watcher) hintView(state string, stop context.CancelFunc) view[hintSet] {
	log := w.cfg.Logger
	id := "health_state"
	if state != "any" {
		id = "health_state(" + state + ")"
	}
	return view[hintSet]{
		id: id,
		fetch: func(q *api.QueryOptions) (hintSet, *api.QueryMeta, error) {
			if state == "any" {
				q.Filter = hintFilter
			}
			checks, meta, err := w.cfg.Client.Health().State(state, q)
			if err != nil {
				if hintUnsupported(err) {
					log.Warn().Err(err).Str("query", id).
						Msg("the agent rejects the health-state query; health hints are off, so a health change is seen only when its service's query has its turn")
					stop()
				}
				return nil, meta, err
			}
			return newHintSet(checks), meta, nil
		},
		equal:  equalHintSets,
		opts:   w.cfg.Query, // local datacenter: hints only ever poke local views
		log:    log,
		result: w.resultFunc("health_state", ""),
	}
}

// poke hurries the local health views a hint names. It only changes when
// they query, never what they publish, so a wrong hint costs a query.
func (w *Watcher) poke(watches map[ServiceKey]*healthWatch, p *hintPokes) {
	for name, idx := range p.Services {
		// A target naming the local datacenter is a view of its own.
		if hw := watches[ServiceKey{Name: name}]; hw != nil {
			hw.slots.poke(idx)
		}
		if dc := w.cfg.Query.Datacenter; dc != "" {
			if hw := watches[ServiceKey{Datacenter: dc, Name: name}]; hw != nil {
				hw.slots.poke(idx)
			}
		}
	}
	if len(p.Nodes) == 0 {
		return
	}
	// A node check's service is every service with an instance there; what
	// the views last read is the best knowledge of where those are.
	for k, hw := range watches {
		if !w.isLocal(k) || hw.data == nil {
			continue
		}
		for _, in := range hw.data.Instances {
			if idx, ok := p.Nodes[in.Node]; ok {
				hw.slots.poke(idx)
			}
		}
	}
}

// answeredError reports whether Consul answered with an error status rather
// than not answering at all. For a remote-datacenter query that means the
// local agent works and the remote side does not (no path to the
// datacenter, no leader there, a token that is not valid there). A local
// agent that does not answer is no reason to give up on a remote service:
// the rest of the catalog waits for that agent too.
func answeredError(err error) bool {
	var se api.StatusError
	return errors.As(err, &se)
}

func (w *Watcher) resultFunc(endpoint, datacenter string) func(error, time.Duration) {
	if w.cfg.OnQuery == nil {
		return nil
	}
	return func(err error, d time.Duration) { w.cfg.OnQuery(endpoint, datacenter, err, d) }
}

// remoteDatacenter is the datacenter a target is read from, "" if local.
func (w *Watcher) remoteDatacenter(k ServiceKey) string {
	if w.isLocal(k) {
		return ""
	}
	return k.Datacenter
}
