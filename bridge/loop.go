package bridge

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/jonboulle/clockwork"
)

// loop owns the daemon's mutable state: the latest catalog, the active
// policy and the debounce timer. Its states:
//   - waiting: no complete catalog or (with KV) no policy read yet; nothing
//     is served, so proxies' requests wait rather than get a partial world;
//   - idle: serving, nothing pending;
//   - pending: something changed; after a quiet period the timer fires at
//     once, otherwise HoldOff after the latest change (never sooner than
//     HoldOff after the last build, never later than MaxDelay after the
//     first change of the burst);
//   - build: on the timer, the newest catalog and policy are built and
//     served. A build also waits (up to pendingGrace) for services a new
//     policy just started watching, so new routes do not briefly point at
//     empty clusters.
type loop struct {
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
	debounce     debounce
	pendingSince time.Time
	timer        clockwork.Timer
	// armed is whether timer is armed for a build (see arm).
	armed        bool
	lastWarnings []string
	// translator remembers the last translation, so a change rebuilds
	// only the resources it touches.
	translator *xds.Translator
	// translate, if set, replaces translator.Translate: the loop's tests
	// make a build fail with it.
	translate func(*ir.Model) (*xds.Output, error)
	// lastCPU is the process's CPU time at the last build (debounce).
	lastCPU time.Duration
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
}

// policyRead is the result of reading and parsing every policy source.
type policyRead struct {
	trigger string
	kv      *consul.KVUpdate
	docs    []*policy.Document
	diags   hclDiagnostics
	sources []SourceStatus
	// merged: docs were merged into cfg (nil if that failed) and the
	// files cfg names read, off the loop (see prepare in files.go).
	merged bool
	cfg    *policy.Config
	// readFiles, if set, replaces policy.ReadFiles (tests stall it).
	readFiles func(*policy.Policy, time.Time) hclDiagnostics
}

const pendingGrace = 2 * time.Second

func (l *loop) run(ctx context.Context, updates <-chan consul.Update, kvUpdates <-chan consul.KVUpdate) {
	l.debounce = debounce{holdOff: l.d.cfg.Settings.XDS.DebounceHoldOff, maxDelay: l.d.cfg.Settings.XDS.DebounceMaxDelay, fixed: !l.d.cfg.Settings.XDS.DebounceAdaptive}
	if l.parser == nil {
		l.parser = newDocParser(l.d.clock, ParseBudget)
	}
	l.readDone = make(chan policyRead, 1)
	l.timer = l.d.clock.NewTimer(time.Hour)
	l.timer.Stop()
	defer l.timer.Stop()
	switch {
	case l.kvNeeded:
		l.setStatus(func(st *PolicyStatus) { st.Waiting = "waiting for the first read of Consul KV policy documents" })
	case l.ce.needed:
		l.setStatus(func(st *PolicyStatus) { st.Waiting = "waiting for the first read of Consul config entries" })
	default:
		docs, _, sources := l.readDocuments(nil, nil)
		l.docs = docs
		l.recordPolicy(append(sources, tlsSources(l.policy)...), nil)
		l.d.metrics.reloads.WithLabelValues("ok").Inc()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-updates:
			if !u.Complete && !l.d.ready.Load() {
				continue // a partial world is never served
			}
			if l.changedAt.IsZero() || u.ChangedAt.Before(l.changedAt) {
				l.changedAt = u.ChangedAt
			}
			l.catalog = &u
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
				l.noteChange(u.ChangedAt)
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
			l.watcher.SetTargets(l.mesh.watchTargets(l.policy))
			l.noteChange(mu.ChangedAt)
			l.schedule()
		case <-l.d.reload:
			l.reloadPolicy("files")
		case r := <-l.readDone:
			l.reading = false
			l.applyRead(r)
			if t := l.rereadTrigger; t != "" {
				l.rereadTrigger = ""
				l.reloadPolicy(t)
			}
		case <-l.timer.Chan():
			l.build(ctx)
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
	// The CPU spent since the last build: that build, its pushes, and
	// whatever else the bridge did meanwhile; it sets the next window.
	if cpu := l.d.cpuTime(); l.lastCPU > 0 {
		l.debounce.measured(cpu - l.lastCPU)
		l.lastCPU = cpu
	} else {
		l.lastCPU = cpu
	}
	if l.catalog == nil || l.kvNeeded && !l.kvAccepted || l.ce.waiting() || l.mesh.waiting() {
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
			l.d.log.Info().Int("instances", held).Time("until", until).Msg("holding health downgrades after Consul reconnect")
			// Rebuild when the window ends, with the real state.
			l.arm(until.Sub(start) + time.Millisecond)
		}
	}
	m, warnings := model.Build(cat, l.policy)
	// The proxyless gRPC mesh: Connect-native servers (model/meshgrpc.go).
	warnings = append(warnings, model.BuildMeshGRPC(m, cat, l.policy, l.d.cfg.Settings.Consul.Datacenter)...)
	for _, n := range l.catalog.Skipped {
		warnings = append(warnings, fmt.Sprintf("Consul service %q is skipped: Consul's HTTP API cannot query its name, nor can it be a cluster name (use letters, digits, '-', '_' and '.')", n))
	}
	l.d.metrics.skippedServices.Set(float64(len(l.catalog.Skipped)))
	l.logNewWarnings(warnings)
	if l.translator == nil {
		l.translator = xds.NewTranslator()
	}
	translate := l.translator.Translate
	if l.translate != nil {
		translate = l.translate
	}
	out, err := translate(m)
	l.d.metrics.translate.Observe(l.d.clock.Since(start).Seconds())
	if err != nil {
		l.d.log.Error().Err(err).Msg("translation failed; keeping the last good snapshot")
		return
	}
	if failed := groupFailures(out); len(failed) > 0 {
		msg := "proxy group could not be translated; it keeps its last good listeners and routes"
		if !l.d.ready.Load() {
			// The first build must succeed whole: a failed group has no
			// last good state to serve its proxies.
			msg = "proxy group could not be translated in the first build; not ready"
		}
		for _, f := range failed {
			l.d.log.Error().Str("group", f.group).Err(f.err).Msg(msg)
		}
		if !l.d.ready.Load() {
			return
		}
	}
	updateStart := l.d.clock.Now()
	changed, err := l.d.xds.Update(ctx, out, sidecarResolve(l.policy))
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
	if !l.d.ready.Swap(true) {
		l.d.log.Info().Int("clusters", len(out.Shared.Clusters)).Int("groups", len(out.Groups)).
			Msg("first complete Consul sync served; ready")
	}
	if len(changed) > 0 {
		// Where a change's time went before the fan-out: waiting for
		// its build (debounce, a build before it), building and
		// translating, then serving (answering every waiting watch).
		ev := l.d.log.Info().Strs("types", changed).Int("clusters", len(out.Shared.Clusters)).
			Dur("build", updateStart.Sub(start)).Dur("update", updated.Sub(updateStart))
		if !l.changedAt.IsZero() {
			ev = ev.Dur("since_consul_change", l.d.clock.Since(l.changedAt)).Dur("waited", buildStart.Sub(l.changedAt))
		}
		ev.Msg("snapshot updated")
	}
	l.changedAt = time.Time{}
	l.served = cat
	l.d.planBase.Store(&planBase{catalog: cat, docs: l.docs, policy: l.policy, model: m})
	var failures []GroupFailure
	for _, f := range groupFailures(out) {
		failures = append(failures, GroupFailure{Group: f.group, Error: f.err.Error()})
	}
	l.d.metrics.failingGroups.Set(float64(len(failures)))
	sources := map[string]string{}
	for _, g := range out.Groups {
		maps.Copy(sources, g.RouteSources)
	}
	if out.Proxyless != nil {
		maps.Copy(sources, out.Proxyless.RouteSources)
	}
	l.setStatus(func(st *PolicyStatus) {
		st.Warnings, st.FailedGroups, st.RouteSources = warnings, failures, sources
	})
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

// reloadPolicy re-reads the files and merges them with the latest KV
// documents. A policy with any error is rejected whole and the last good
// one keeps serving. Before any policy with the KV documents was accepted
// there is no last good one: the bridge then serves the last accepted
// versions of the broken documents from the state file, or stays unready
// (and answers no proxy) naming what is wrong.
func (l *loop) reloadPolicy(trigger string) {
	if l.kvNeeded && l.kvDocs == nil || l.ce.waiting() {
		return // the first KV (or config entries) read will load everything
	}
	if l.reading {
		l.rereadTrigger = trigger
		return
	}
	l.reading = true
	kv, ce := l.kvDocs, l.ce.docs
	go func() {
		docs, diags, sources := l.readDocuments(kv, ce)
		r := policyRead{trigger: trigger, kv: kv, docs: docs, diags: diags, sources: sources, readFiles: l.readFiles}
		r.prepare(l.d.clock.Now())
		l.readDone <- r
	}()
}

// applyRead tries the policy a read produced and accepts or rejects it.
func (l *loop) applyRead(r policyRead) {
	trigger := r.trigger
	try := l.tryDocuments(r)
	if try.diags.HasErrors() && l.kvNeeded && !l.kvAccepted {
		if fallback, replaced := l.fromKVState(brokenKeys(try.diags)); fallback != nil && !fallback.diags.HasErrors() {
			l.accept(trigger, *fallback)
			l.reject(trigger, try) // shown on /v1/policy until fixed
			l.d.log.Warn().Strs("keys", replaced).Str("state_dir", l.d.cfg.Settings.Consul.StateDir).
				Msg("KV policy documents rejected at start; serving their last accepted versions")
			l.setStatus(func(st *PolicyStatus) {
				st.PolicyWarnings = append(st.PolicyWarnings, fmt.Sprintf("serving the last accepted versions of %s from %s, kept since before this start",
					strings.Join(replaced, ", "), filepath.Join(l.d.cfg.Settings.Consul.StateDir, kvStateFile)))
			})
			return
		}
		l.reject(trigger, try)
		l.setStatus(func(st *PolicyStatus) {
			st.Waiting = "the policy (files and KV documents) was rejected at start and no last accepted version of the KV documents could be served (consul.state_dir); no proxy is answered until it is fixed: " +
				strings.Join(st.LastError.Diagnostics, "; ")
		})
		return
	}
	if try.diags.HasErrors() {
		l.reject(trigger, try)
		return
	}
	l.accept(trigger, try)
}

// attempt is one policy tried: from the files and the KV documents kv.
type attempt struct {
	cfg     *policy.Config
	docs    []*policy.Document
	kv      *consul.KVUpdate
	diags   hclDiagnostics
	sources []SourceStatus
}

// tryPolicy reads, merges, validates and translates a policy. It is
// accepted only if it can be served: its TLS files read, and built and
// translated against the current catalog, every resource valid.
func (l *loop) tryPolicy(kv *consul.KVUpdate) attempt {
	docs, diags, sources := l.readDocuments(kv, l.ce.docs)
	return l.tryDocuments(policyRead{kv: kv, docs: docs, diags: diags, sources: sources})
}

// tryDocuments is tryPolicy on documents already read.
func (l *loop) tryDocuments(r policyRead) attempt {
	if !r.merged {
		r.prepare(l.d.clock.Now()) // tryPolicy's read, on the loop at start
	}
	a := attempt{kv: r.kv, diags: r.diags, sources: r.sources, docs: r.docs, cfg: r.cfg}
	if a.diags.HasErrors() {
		return a
	}
	cfg := r.cfg
	var cat *consul.Catalog
	if l.catalog != nil {
		cat = l.catalog.Catalog
	}
	if l.translator == nil {
		l.translator = xds.NewTranslator()
	}
	a.diags = append(a.diags, CheckTranslation(cat, cfg.Policy, l.translator)...)
	return a
}

// fromKVState tries the current KV documents with the broken ones
// replaced by their versions from the state file, then the state file's
// documents alone; nil if there is no state file.
func (l *loop) fromKVState(broken map[string]bool) (*attempt, []string) {
	dir := l.d.cfg.Settings.Consul.StateDir
	if dir == "" {
		return nil, nil
	}
	st, err := loadKVState(dir, l.d.cfg.Settings.Consul.KVPrefix)
	if err != nil {
		l.d.log.Error().Err(err).Msg("cannot read the KV state file; ignoring it")
	}
	if st == nil {
		return nil, nil
	}
	patched, replaced := patchKV(l.kvDocs, st, broken)
	if len(replaced) > 0 {
		if a := l.tryPolicy(patched); !a.diags.HasErrors() {
			return &a, replaced
		}
	}
	whole := l.tryPolicy(&consul.KVUpdate{Documents: st.Documents})
	var keys []string
	for _, d := range st.Documents {
		keys = append(keys, d.Key)
	}
	return &whole, keys
}

func (l *loop) accept(trigger string, a attempt) {
	cfg := a.cfg
	if !reflect.DeepEqual(cfg.Settings, l.d.cfg.Settings) {
		l.d.log.Warn().Msg("daemon settings (consul, xds, admin, log blocks) changed; restart to apply them")
	}
	l.policy = cfg.Policy
	l.docs = a.docs
	if l.kvNeeded {
		l.kvAccepted = true
		if dir := l.d.cfg.Settings.Consul.StateDir; dir != "" {
			if err := saveKVState(dir, l.d.cfg.Settings.Consul.KVPrefix, a.kv.Documents); err != nil {
				l.d.log.Error().Err(err).Str("state_dir", dir).Msg("cannot write the KV state file; a restart with a broken KV document would not be served")
			}
		}
	}
	if why := l.mesh.restartNeeded(cfg.Policy); why != "" {
		l.d.log.Warn().Str("reason", why).Msg("mesh settings changed; restart to apply them")
	}
	l.d.watchPolicyFiles(cfg.Policy)
	l.watcher.SetTargets(l.mesh.watchTargets(cfg.Policy))
	if l.meshWatcher != nil {
		// mesh_routes may name services no sidecar dials: follow them.
		l.meshWatcher.SetTargets(model.MeshWatchTargets(cfg.Policy))
	}
	l.recordPolicy(append(a.sources, tlsSources(cfg.Policy)...), a.diags)
	l.d.metrics.reloads.WithLabelValues("ok").Inc()
	l.d.log.Info().Str("trigger", trigger).Int("sources", len(a.sources)).Msg("policy loaded")
	l.schedule()
}

func (l *loop) reject(trigger string, a attempt) {
	// Keep watching the files of the rejected policy too, so that
	// fixing (or creating) the file it could not use reloads by itself.
	var attempted *policy.Policy
	if a.cfg != nil {
		attempted = a.cfg.Policy
	}
	l.d.watchPolicyFiles(l.policy, attempted)
	lines := policy.FormatDiagnostics(a.diags)
	l.d.metrics.reloads.WithLabelValues("failed").Inc()
	l.d.log.Error().Str("trigger", trigger).Strs("diagnostics", lines).Msg("policy rejected; keeping the last good policy")
	l.setStatus(func(st *PolicyStatus) {
		st.LastError = &ReloadError{At: l.d.clock.Now(), Diagnostics: lines}
		st.FailedReloads++
	})
}

// readDocuments reads and parses every source. It runs off the loop's
// goroutine (see reloadPolicy), so it uses only what does not change
// under it: the configured file names, kv and the parser.
func (l *loop) readDocuments(kv *consul.KVUpdate, ce *configDocs) ([]*policy.Document, hclDiagnostics, []SourceStatus) {
	var (
		docs    []*policy.Document
		diags   hclDiagnostics
		sources []SourceStatus
	)
	for _, f := range l.d.cfg.ConfigFiles {
		src, err := policy.ReadBoundedFile(context.Background(), f, policy.MaxDocumentBytes)
		if err != nil {
			diags = append(diags, readError(f, err))
			continue
		}
		doc, ds := l.parser.Parse(f, src, false)
		diags = append(diags, ds...)
		if doc != nil {
			docs = append(docs, doc)
		}
		sources = append(sources, SourceStatus{Name: f, Kind: "file", Hash: hash(src)})
	}
	if kv != nil {
		for _, r := range kv.Rejected {
			diags = append(diags, kvRejected(r))
		}
		for _, kd := range kv.Documents {
			doc, ds := l.parser.Parse(kd.Key, kd.Value, true)
			diags = append(diags, ds...)
			if doc != nil {
				docs = append(docs, doc)
			}
			sources = append(sources, SourceStatus{Name: kd.Key, Kind: "kv", Hash: hash(kd.Value), ModifyIndex: kd.ModifyIndex})
		}
	}
	if ce != nil {
		d, ds, src := l.parseConfigDocs(ce)
		docs, diags, sources = append(docs, d...), append(diags, ds...), append(sources, src...)
	}
	l.parser.endRead()
	return docs, diags, sources
}

// tlsSources lists the certificate and CA files of a policy with their
// SHA-256, so /v1/policy shows which certificate is being served. Key
// files are left out: not even a digest of a key is shown.
func tlsSources(p *policy.Policy) []SourceStatus {
	var out []SourceStatus
	seen := map[string]bool{}
	for _, f := range p.Files() {
		if f.Kind == policy.PEMPrivateKey || seen[f.Path] || f.PEM == nil {
			continue
		}
		seen[f.Path] = true
		out = append(out, SourceStatus{Name: f.Path, Kind: "certificate", Hash: hash(f.PEM)})
	}
	return out
}

func (l *loop) recordPolicy(sources []SourceStatus, diags hclDiagnostics) {
	l.setStatus(func(st *PolicyStatus) {
		st.Waiting = ""
		st.LoadedAt = l.d.clock.Now()
		st.Sources = sources
		st.LastError = nil
		st.SuccessfulReloads++
		st.PolicyWarnings = policy.FormatDiagnostics(diags)
	})
}

func (l *loop) setStatus(f func(*PolicyStatus)) {
	st := *l.d.status.Load()
	f(&st)
	l.d.status.Store(&st)
}

// noteChange records when a change folded into the next build happened.
func (l *loop) noteChange(at time.Time) {
	if l.changedAt.IsZero() || at.Before(l.changedAt) {
		l.changedAt = at
	}
}
