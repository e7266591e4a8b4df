package bridge

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/jonboulle/clockwork"
)

// loop owns the daemon's mutable state: the latest catalog, the active
// policy and the debounce timer. Its states:
//   - waiting: no complete catalog or (with KV) no policy read yet; nothing
//     is served, so proxies' requests wait rather than get a partial world;
//   - idle: serving, nothing pending;
//   - pending: something changed; after a quiet window (and while
//     changes are calm the window is zero) the timer fires at once,
//     otherwise a window after the latest change (never sooner than a
//     window after the last build, never later than MaxDelay after the
//     first change of the burst); see debounce.go;
//   - fan-out wait: the timer fired while the last build's fan-out to the
//     proxies still runs; the build follows as soon as it ends, or a
//     hold-off after the last build if a slow proxy holds it open
//     (fanwait.go);
//   - build: on the timer, the newest catalog and policy are built and
//     served. A build also waits (up to pendingGrace) for services a new
//     policy just started watching, so new routes do not briefly point at
//     empty clusters.
type loop struct {
	// failing are the groups the last served build could not translate:
	// the reload gate does not refuse a policy for them (DiagnoseExcept).
	failing map[string]bool

	d        *Daemon
	watcher  *consul.Watcher
	policy   *policy.Policy
	kvNeeded bool
	kvDocs   *consul.KVUpdate
	// ce is the policy made from Consul's config entries (configentries.go).
	ce configEntries
	// policyEntries says whether the config entries make policy
	// (consul.config_entries); they may be read for the mesh only.
	policyEntries bool
	// mesh is Consul Connect's state (mesh.go); meshUpdates its watcher's.
	mesh        meshState
	meshUpdates <-chan consul.MeshUpdate
	// meshWatcher, when the mesh is followed, takes the policy's
	// mesh_routes targets on reload.
	meshWatcher *consul.MeshWatcher
	// meshTargets are the targets last given the mesh watcher
	// (setMeshTargets), once meshTargetsSet.
	meshTargets    []consul.ServiceKey
	meshTargetsSet bool
	// kvAccepted is set once a policy with the KV documents was accepted:
	// before, no proxy is answered (a policy lacking a document would
	// serve its groups nothing).
	kvAccepted bool

	catalog *consul.Update
	served  *consul.Catalog // what the last good build used
	// docs are the active policy's documents, kept for the console's
	// plan (a pasted document replaces one of them).
	docs         []*policy.Document
	changedAt    time.Time
	summary      changeSummary
	debounce     debounce
	pendingSince time.Time
	timer        clockwork.Timer
	// armed is whether timer is armed for a build (see arm).
	armed        bool
	lastWarnings []string
	// sources are the last build's route sources (routeSources).
	sources routeSources
	// change is what changed since the last build (nil: nothing yet):
	// the watcher's news, widened to "anything" by every other input.
	change *consul.Change
	// memo remembers the last build, so a change rebuilds only the
	// resources it touches. The reload gate computes on a fork of it and
	// the accepted candidate's fork becomes it (reload.go).
	memo *pipeline.Memo
	// compute, if set, replaces pipeline.Compute: the loop's tests make a
	// build fail with it.
	compute func(pipeline.Input, *pipeline.Memo) (*pipeline.World, error)
	// fanning and fanIdle tell whether the last build's fan-out to the
	// proxies is still running and when it ended (fanwait.go); the
	// xDS server's unless a test sets them. waitingFan: a due build
	// waits for that end.
	fanning    func() bool
	fanIdle    <-chan struct{}
	waitingFan bool
	// readFiles, if set, replaces policy.ReadFiles: the loop's tests
	// make reading a policy's files slow with it.
	readFiles func(*policy.Policy, time.Time) hclDiagnostics

	// Policy documents are read and parsed off the loop (see docParser),
	// so a slow document never holds catalog updates: reading is set while
	// a read runs, its result arrives on readDone, and rereadTrigger
	// records a reload asked for meanwhile (one more read follows).
	parser        *docParser
	reading       bool
	rereadTrigger string
	readDone      chan policyRead
	// files are the configuration files as last read; filesChanged says
	// the file watcher (or SIGHUP) asked for a reload since. Only that
	// asks the disk again: a reload Consul triggers (KV, config entries)
	// reuses them, so it never reads a file an editor is half-way through
	// writing (an empty file is a valid policy without its proxies).
	files        []fileRead
	filesChanged bool
	// follow is what the watcher was last told connected proxies follow
	// (followed.go).
	follow followState
}

const pendingGrace = 2 * time.Second

func (l *loop) run(ctx context.Context, updates <-chan consul.Update, kvUpdates <-chan consul.KVUpdate) {
	l.debounce = debounce{holdOff: l.d.cfg.Settings.XDS.DebounceHoldOff, maxDelay: l.d.cfg.Settings.XDS.DebounceMaxDelay, fixed: !l.d.cfg.Settings.XDS.DebounceAdaptive}
	if l.parser == nil {
		l.parser = newDocParser(l.d.clock, ParseBudget)
	}
	l.readDone = make(chan policyRead, 1)
	if l.fanning == nil {
		l.fanning, l.fanIdle = l.d.xds.FanningOut, l.d.xds.FanoutIdle()
	}
	l.timer = l.d.clock.NewTimer(time.Hour)
	l.timer.Stop()
	defer l.timer.Stop()
	switch {
	case l.kvNeeded:
		l.setStatus(func(st *PolicyStatus) { st.Waiting = "waiting for the first read of Consul KV policy documents" })
	case l.ce.needed:
		l.setStatus(func(st *PolicyStatus) { st.Waiting = "waiting for the first read of Consul config entries" })
	default:
		l.files = readConfigFiles(l.d.cfg.ConfigFiles)
		docs, _, sources := l.readDocuments(l.files, nil, nil)
		l.docs = docs
		l.recordPolicy(append(sources, tlsSources(l.policy)...), nil)
		l.d.metrics.reloads.WithLabelValues("ok").Inc()
	}
	followTick := l.d.clock.NewTicker(followInterval)
	defer followTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-followTick.Chan():
			l.refreshFollowed()
		case u := <-updates:
			if !u.Complete && !l.d.ready.Load() {
				continue // a partial world is never served
			}
			if l.changedAt.IsZero() || u.ChangedAt.Before(l.changedAt) {
				l.changedAt = u.ChangedAt
			}
			l.catalog = &u
			l.noteWhat(u.Changed)
			l.d.catalog.Store(&catalogView{
				Complete: u.Complete, ReceivedAt: l.d.clock.Now(), Pending: u.Pending,
				Unreachable: u.Unreachable, Services: u.Catalog.Services,
			})
			l.schedule()
		case kvu := <-kvUpdates:
			l.kvDocs = &kvu
			l.reloadPolicy("kv")
		case u := <-l.ce.updates:
			if l.mesh.needed && l.mesh.setEntries(u.Entries) {
				l.followLeaves()
				l.watcher.SetTargets(l.mesh.watchTargets(l.policy))
				l.noteChange(u.ChangedAt)
				l.noteWhat(consul.Change{})
				l.schedule()
			}
			if l.policyEntries {
				pu := policyEntries(u)
				if l.ce.docs == nil || !sameJSON(pu.Entries, l.ce.last) {
					l.ce.last = pu.Entries
					l.ce.set(pu)
					l.reloadPolicy("config-entries")
				}
			}
		case mu := <-l.meshUpdates:
			l.mesh.mesh = mu.Mesh
			l.followLeaves()
			l.watcher.SetTargets(l.mesh.watchTargets(l.policy))
			l.noteChange(mu.ChangedAt)
			l.noteWhat(consul.Change{})
			l.schedule()
		case <-l.d.reload:
			l.reloadPolicy("files")
		case r := <-l.readDone:
			l.reading = false
			l.applyRead(r)
			if !l.d.ready.Load() {
				// A first build held for this read (build) runs now,
				// whether the read was accepted or not.
				l.schedule()
			}
			if t := l.rereadTrigger; t != "" {
				l.rereadTrigger = ""
				l.reloadPolicy(t)
			}
		case <-l.timer.Chan():
			if l.holdForFanout() {
				continue
			}
			l.build(ctx)
		case <-l.fanIdle:
			if l.fanoutEnded() {
				l.build(ctx)
			}
		}
	}
}

// schedule arms the build timer for a change (see debounce).
func (l *loop) schedule() { l.arm(l.debounce.changed(l.d.clock.Now())) }

// arm arms the build timer to fire after d. A build is pending from now
// until it has run, so the idle collector does not collect meanwhile;
// every arming goes through here, so none leaves the flag unset.
func (l *loop) arm(d time.Duration) {
	l.armed = true
	l.d.buildPending.Store(true)
	l.timer.Reset(d)
}

func (l *loop) build(ctx context.Context) {
	// Pending through the build and its Update (the fan-out starts
	// there), cleared at the end unless the build re-armed the timer.
	l.d.buildPending.Store(true)
	l.armed = false // the timer fired
	defer func() {
		l.d.buildPending.Store(l.armed)
		l.d.buildsDone.Add(1)
	}()
	start := l.d.clock.Now()
	buildStart := start
	l.debounce.built(start)
	// Before the first build, also while a policy read is in flight: the
	// first read of config entries runs off the loop (reload.go), and a
	// build meanwhile served the files' policy without the entries (a
	// service-resolver redirect missing from the first world served).
	if l.catalog == nil || l.kvNeeded && !l.kvAccepted || l.ce.waiting() || l.mesh.waiting() || !l.d.ready.Load() && (l.catalogBehind() || l.reading) {
		return
	}
	meshPending := l.mesh.pendingTargets(l.policy)
	if (len(l.catalog.Pending) > 0 || len(meshPending) > 0) && l.d.ready.Load() {
		if l.pendingSince.IsZero() {
			l.pendingSince = l.d.clock.Now()
		}
		if l.d.clock.Since(l.pendingSince) < pendingGrace {
			l.arm(l.d.cfg.Settings.XDS.DebounceHoldOff)
			return
		}
		l.d.log.Warn().Strs("services", append(keys(l.catalog.Pending), meshPending...)).Msg("services still loading after grace period; serving without them")
	}
	l.pendingSince = time.Time{}
	start = l.d.clock.Now()
	cat := l.mesh.withMesh(l.catalog.Catalog)
	if dcs, until := l.d.outages.holding(start); len(dcs) > 0 {
		var held int
		cat, held = model.HoldDowngrades(l.served, cat, func(dc string) bool { return dcs[l.d.localDC(dc)] })
		if held > 0 {
			l.d.log.Info().Int("instances", held).Time("until", until).Msg("holding health downgrades and removals after Consul reconnect")
			// Rebuild when the window ends, with the real state.
			l.arm(until.Sub(start) + time.Millisecond)
		}
	}
	in := pipeline.Input{Catalog: cat, Policy: l.policy, Datacenter: l.d.cfg.Settings.Consul.Datacenter}
	if l.change != nil {
		in.Change = *l.change
	}
	if l.memo == nil {
		l.memo = pipeline.NewMemo()
	}
	compute := pipeline.Compute
	if l.compute != nil {
		compute = l.compute
	}
	w, err := compute(in, l.memo)
	l.d.metrics.translate.Observe(l.d.clock.Since(start).Seconds())
	if err != nil {
		l.d.log.Error().Err(err).Msg("translation failed; keeping the last good snapshot")
		return
	}
	m, out := w.Model, w.Output
	warnings := w.Warnings
	for _, n := range l.catalog.Skipped {
		warnings = append(warnings, fmt.Sprintf("Consul service %q is skipped: Consul's HTTP API cannot query its name, nor can it be a cluster name (use letters, digits, '-', '_' and '.')", n))
	}
	l.d.metrics.skippedServices.Set(float64(len(l.catalog.Skipped)))
	l.logNewWarnings(warnings)
	if failed := w.Failures(); len(failed) > 0 {
		msg := "proxy group could not be translated; it keeps its last good listeners and routes"
		if !l.d.ready.Load() {
			// The first build must succeed whole: a failed group has no
			// last good state to serve its proxies.
			msg = "proxy group could not be translated in the first build; not ready"
		}
		for _, f := range failed {
			l.d.log.Error().Str("group", f.Group).Err(f.Err).Msg(msg)
		}
		if !l.d.ready.Load() {
			// Shown where every other failed group is (/v1/policy,
			// proxy_groups_failing) and named by /readyz: without it they
			// all pointed at Consul's first sync.
			var failures []GroupFailure
			for _, f := range failed {
				failures = append(failures, GroupFailure{Group: f.Group, Error: f.Err.Error()})
			}
			l.d.metrics.failingGroups.Set(float64(len(failures)))
			l.setStatus(func(st *PolicyStatus) { st.Warnings, st.FailedGroups = warnings, failures })
			return
		}
	}
	updateStart := l.d.clock.Now()
	changed, err := l.d.xds.Update(ctx, out, pipeline.GroupOf(l.policy))
	updated := l.d.clock.Now()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		if !l.d.ready.Load() {
			l.d.log.Error().Err(err).Msg("setting the first snapshot failed; not ready")
			return
		}
		// Update fails per node.cluster: the keys named in err keep their
		// last good state, every other key was served this build.
		l.d.log.Error().Err(err).Msg("some node clusters could not be updated and keep their last good state")
	}
	// After the Update that serves the sidecars' groups: a stream whose
	// key this changes reconnects to them.
	l.d.xds.SetSidecars(sidecarIndex(m))
	l.d.metrics.builds.Inc()
	if !l.changedAt.IsZero() && len(changed) > 0 {
		l.d.metrics.changeToPush.Observe(l.d.clock.Since(l.changedAt).Seconds())
	}
	// The status before ready: whoever sees ready also sees this
	// build's failed groups (none, for a first build), not the failed
	// first attempt's (CI once read ready with the old failure).
	var failures []GroupFailure
	for _, f := range w.Failures() {
		failures = append(failures, GroupFailure{Group: f.Group, Error: f.Err.Error()})
	}
	l.d.metrics.failingGroups.Set(float64(len(failures)))
	l.failing = failingSet(failures)
	sources := l.sources.of(out)
	l.setStatus(func(st *PolicyStatus) {
		st.Warnings, st.FailedGroups, st.RouteSources = warnings, failures, sources
	})
	if !l.d.ready.Swap(true) {
		l.d.log.Info().Int("clusters", len(out.Shared.Clusters)).Int("groups", len(out.Groups)).
			Msg("first complete Consul sync served; ready")
	}
	if len(changed) > 0 {
		// Where a change's time went before the fan-out: waiting for
		// its build (debounce, a build before it), building and
		// translating, then serving (answering every waiting watch).
		// Endpoint churn is logged at debug, with a summary at info
		// (changesummary.go); anything else at info as it happens.
		ev := l.d.log.Debug()
		if !onlyEndpoints(changed) {
			ev = l.d.log.Info()
		}
		// Microseconds are precision enough: "8.939ms", not "8.939026ms".
		us := func(d time.Duration) time.Duration { return d.Round(time.Microsecond) }
		ev = ev.Strs("types", changed).Int("clusters", len(out.Shared.Clusters)).Bool("endpoint_only_path", w.Incremental).
			Dur("build", us(updateStart.Sub(start))).Dur("update", us(updated.Sub(updateStart)))
		if !l.changedAt.IsZero() {
			ev = ev.Dur("since_consul_change", us(l.d.clock.Since(l.changedAt))).Dur("waited", us(buildStart.Sub(l.changedAt)))
		}
		ev.Msg("snapshot updated")
		sample := BuildSample{At: updated, BuildMs: ms(updateStart.Sub(start)), UpdateMs: ms(updated.Sub(updateStart)), Types: slices.Clone(changed)}
		if !l.changedAt.IsZero() {
			c2p := ms(l.d.clock.Since(l.changedAt))
			sample.ChangeToPushMs = &c2p
		}
		l.d.history.addBuild(sample)
		l.summary.add(l.d.log, l.d.clock.Now(), changed, updateStart.Sub(start))
	}
	l.changedAt = time.Time{}
	l.change = nil
	l.served = cat
	l.d.planBase.Store(&planBase{catalog: cat, docs: l.docs, policy: l.policy, model: m})
}

// catalogBehind reports whether the catalog lacks a service the watcher
// now follows: the mesh or the config entries added it after the
// catalog's last complete read (its incomplete updates are not kept
// before the first build). The first world waits for it, rather than
// serve that service's sidecars as unhealthy and its clusters as empty
// and call itself ready; the complete update that follows schedules the
// build.
func (l *loop) catalogBehind() bool {
	for _, k := range l.mesh.watchTargets(l.policy).Services {
		if l.catalog.Catalog.Service(k.Datacenter, k.Name) == nil {
			return true
		}
	}
	return false
}

func keys(ks []consul.ServiceKey) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.String()
	}
	return out
}

// logNewWarnings logs each build warning once, not on every rebuild.
func (l *loop) logNewWarnings(warnings []string) {
	for _, w := range warnings {
		if !slices.Contains(l.lastWarnings, w) {
			l.d.log.Warn().Str("warning", w).Msg("policy or catalog problem")
		}
	}
	l.lastWarnings = warnings
}

func (l *loop) setStatus(f func(*PolicyStatus)) {
	st := *l.d.status.Load()
	f(&st)
	l.d.status.Store(&st)
}

// noteWhat folds what a change touched into the next build's Change; an
// input that says nothing narrower (a policy, the mesh, config entries)
// passes the zero Change: anything may differ.
func (l *loop) noteWhat(c consul.Change) {
	if l.change == nil {
		l.change = &c
		return
	}
	merged := l.change.Merge(c)
	l.change = &merged
}

// noteChange records when a change folded into the next build happened.
func (l *loop) noteChange(at time.Time) {
	if l.changedAt.IsZero() || at.Before(l.changedAt) {
		l.changedAt = at
	}
}

// ms is d in milliseconds, for the console's history.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// routeSources remembers the route sources of the last build's listener
// sets. They come from every group's and the proxyless clients' route
// configurations, thousands of entries with export_all_services (a
// proxyless listener per cluster), and a flip that changes only
// endpoints hands over the very same sets: gathering them again cost more
// than the flip's build (issue 40).
type routeSources struct {
	from []*xds.Resources // the sets they were gathered from, sorted by group
	all  map[string]string
}

// of returns the route sources of out: the last ones when out's groups
// and proxyless resources are the same objects, else gathered afresh.
func (r *routeSources) of(out *xds.Output) map[string]string {
	from := make([]*xds.Resources, 0, len(out.Groups)+1)
	for _, g := range slices.Sorted(maps.Keys(out.Groups)) {
		from = append(from, out.Groups[g])
	}
	from = append(from, out.Proxyless)
	if r.all != nil && slices.Equal(from, r.from) {
		return r.all
	}
	all := map[string]string{}
	for _, res := range from {
		if res != nil {
			maps.Copy(all, res.RouteSources)
		}
	}
	r.from, r.all = from, all
	return all
}
