// Package bridge runs the daemon around model.Build: it watches Consul's
// catalog (and KV for policy), debounces changes, builds and translates
// the model, and serves it over xDS, with readiness, reloads, an admin API
// and metrics. The join of catalog and policy itself is package model.
package bridge

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// Config configures a Daemon.
type Config struct {
	// ConfigFiles are re-read on every reload (file change or Reload).
	ConfigFiles []string
	// Settings are the daemon settings loaded at start; a reload that
	// changes them is logged, not applied (they need a restart).
	Settings policy.Settings
	// Policy is the routing policy loaded from ConfigFiles at start. With
	// a KV prefix configured, the daemon waits for KV before serving.
	Policy *policy.Policy
	Logger zerolog.Logger
	// Query tunes Consul blocking queries; zero fields take defaults, and
	// the datacenter, stale and wait time come from Settings.
	Query consul.QueryOptions
	// Registry receives the daemon's metrics, served on /metrics; nil makes
	// a private one.
	Registry *prometheus.Registry
}

// Daemon runs the whole pipeline: Consul and policy watches, debounce,
// build, translate, and the xDS and admin servers.
type Daemon struct {
	cfg Config
	log zerolog.Logger
	xds *serve.Server

	started   chan struct{}
	xdsAddr   net.Addr
	adminAddr net.Addr
	reload    chan struct{}
	// policyFiles carries the files the policy names (certificates,
	// keys, CAs) from the loop to watchFiles after every reload.
	policyFiles chan []string

	ready   atomic.Bool
	status  atomic.Pointer[PolicyStatus]
	catalog atomic.Pointer[catalogView]
	reg     *prometheus.Registry
	metrics *metrics

	// consulFailingSince is when Consul requests started failing (unix
	// nanoseconds), 0 while the last one succeeded.
	consulFailingSince atomic.Int64
	lastConsulOK       atomic.Int64
	// holdUntil (unix nanoseconds) ends the window after a Consul outage
	// in which health downgrades are held back.
	holdUntil atomic.Int64
}

// consulQuery records every Consul request's outcome for metrics and for
// readiness: an unreachable Consul does not stop serving, but after
// stale_after an operator should know the world may have moved on.
func (d *Daemon) consulQuery(endpoint string, err error, dur time.Duration) {
	d.metrics.consulQuery(endpoint, err, dur)
	now := time.Now().UnixNano()
	if err == nil {
		d.lastConsulOK.Store(now)
		if d.consulFailingSince.Swap(0) != 0 && d.cfg.Settings.Consul.ReconnectHold > 0 && d.ready.Load() {
			d.holdUntil.Store(now + int64(d.cfg.Settings.Consul.ReconnectHold))
			d.log.Info().Dur("hold", d.cfg.Settings.Consul.ReconnectHold).Msg("Consul is back; holding back health downgrades while its checks settle")
		}
		return
	}
	d.consulFailingSince.CompareAndSwap(0, now)
}

// consulStale says why readiness should fail because of Consul, or "".
func (d *Daemon) consulStale() string {
	since := d.consulFailingSince.Load()
	if since == 0 {
		return ""
	}
	down := time.Since(time.Unix(0, since))
	if down < d.cfg.Settings.Consul.StaleAfter {
		return ""
	}
	last := "never"
	if ok := d.lastConsulOK.Load(); ok != 0 {
		last = time.Unix(0, ok).UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("Consul unreachable for %s (last successful request: %s); serving the last known state", down.Round(time.Second), last)
}

// catalogView is the catalog the daemon serves from, for /v1/catalog.
type catalogView struct {
	Complete    bool                `json:"complete"`
	ReceivedAt  time.Time           `json:"received_at"`
	Pending     []consul.ServiceKey `json:"pending,omitempty"`
	Unreachable []consul.ServiceKey `json:"unreachable,omitempty"`
	Services    []*consul.Service   `json:"services"`
}

// New returns a daemon; nothing runs until Run.
func New(cfg Config) *Daemon {
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	d := &Daemon{
		reg: reg,
		cfg: cfg,
		log: cfg.Logger.With().Str("component", "bridge").Logger(),
		xds: serve.NewServer(serve.ServerConfig{
			Logger:          cfg.Logger,
			Registerer:      reg,
			TLS:             cfg.Settings.XDS.TLS,
			AuthorizeNodes:  cfg.Settings.XDS.AuthorizeNodes,
			MaxInitialSyncs: cfg.Settings.XDS.MaxInitialSyncs,
		}),
		started:     make(chan struct{}),
		reload:      make(chan struct{}, 1),
		policyFiles: make(chan []string, 1),
	}
	d.status.Store(&PolicyStatus{})
	d.metrics = newMetrics(reg, d.notReadyReason)
	return d
}

// Started is closed once the xDS and admin listeners are open.
func (d *Daemon) Started() <-chan struct{} { return d.started }

// XDSAddr is the address xDS is served on; valid after Started.
func (d *Daemon) XDSAddr() net.Addr { return d.xdsAddr }

// AdminAddr is the admin HTTP address; valid after Started.
func (d *Daemon) AdminAddr() net.Addr { return d.adminAddr }

// Ready reports whether a complete Consul sync with a valid policy has
// been served.
func (d *Daemon) Ready() bool { return d.ready.Load() }

// Policy returns the status of the active policy and the last reload.
func (d *Daemon) Policy() *PolicyStatus { return d.status.Load() }

// Reload asks the daemon to re-read its configuration files (SIGHUP). It
// never blocks; reloads requested while one is pending coalesce.
func (d *Daemon) Reload() {
	select {
	case d.reload <- struct{}{}:
	default:
	}
}

// Run serves until ctx ends or a server fails.
func (d *Daemon) Run(ctx context.Context) error {
	s := d.cfg.Settings
	maxQueries := s.Consul.MaxQueries
	client, err := consul.NewClient(consul.ClientConfig{
		Address:    s.Consul.Address,
		Datacenter: s.Consul.Datacenter,
		TokenFile:  s.Consul.TokenFile,
		// The watcher's queries, the KV watch and a little slack: the
		// watcher never has more than maxQueries requests in flight, so
		// none of them ever waits for a connection inside the transport.
		MaxConns: maxQueries + 4,
	})
	if err != nil {
		return err
	}
	xdsLis, err := listen(s.XDS.Listen)
	if err != nil {
		return fmt.Errorf("xds listen on %s: %w", s.XDS.Listen, err)
	}
	adminLis, err := listen(s.Admin.Listen)
	if err != nil {
		xdsLis.Close()
		return fmt.Errorf("admin listen on %s: %w", s.Admin.Listen, err)
	}
	d.xdsAddr, d.adminAddr = xdsLis.Addr(), adminLis.Addr()
	close(d.started)

	q := d.cfg.Query
	q.Datacenter, q.Stale, q.WaitTime, q.UseCache = s.Consul.Datacenter, s.Consul.Stale, s.Consul.WaitTime, s.Consul.UseCache
	consulLog := d.cfg.Logger.With().Str("component", "consul").Logger()
	watcher := consul.NewWatcher(consul.Config{
		Client:     client,
		Query:      q,
		Targets:    model.WatchTargets(d.cfg.Policy),
		Logger:     consulLog,
		OnQuery:    d.consulQuery,
		MaxQueries: maxQueries,
	})
	stats := watcher.QueryStats
	d.metrics.queryStats.Store(&stats)
	var kv *consul.KVWatcher
	if s.Consul.KVPrefix != "" {
		kv = consul.NewKVWatcher(consul.KVConfig{Client: client, Prefix: s.Consul.KVPrefix, Query: q, Logger: consulLog, OnQuery: d.consulQuery})
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) {
		if err != nil {
			errOnce.Do(func() { firstErr = err })
			cancel()
		}
	}
	wg.Go(func() { fail(watcher.Run(ctx)) })
	var kvUpdates <-chan consul.KVUpdate
	if kv != nil {
		kvUpdates = kv.Updates()
		wg.Go(func() { fail(kv.Run(ctx)) })
	}
	wg.Go(func() { fail(d.watchFiles(ctx)) })
	wg.Go(func() { fail(d.xds.Serve(ctx, xdsLis)) })
	wg.Go(func() { fail(d.serveAdmin(ctx, adminLis)) })
	wg.Go(func() {
		l := &loop{d: d, watcher: watcher, policy: d.cfg.Policy, kvNeeded: kv != nil}
		l.run(ctx, watcher.Updates(), kvUpdates)
	})
	wg.Wait()
	return firstErr
}

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

	catalog      *consul.Update
	served       *consul.Catalog // what the last good build used
	changedAt    time.Time
	burstStart   time.Time
	lastBuild    time.Time
	pendingSince time.Time
	timer        *time.Timer
	lastWarnings []string
	// translator remembers the last translation, so a change rebuilds
	// only the resources it touches.
	translator *xds.Translator
}

const pendingGrace = 2 * time.Second

func (l *loop) run(ctx context.Context, updates <-chan consul.Update, kvUpdates <-chan consul.KVUpdate) {
	l.timer = time.NewTimer(time.Hour)
	l.timer.Stop()
	defer l.timer.Stop()
	if l.kvNeeded {
		l.setStatus(func(st *PolicyStatus) { st.Waiting = "waiting for the first read of Consul KV policy documents" })
	} else {
		_, _, sources := l.readDocuments()
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
				Complete: u.Complete, ReceivedAt: time.Now(), Pending: u.Pending,
				Unreachable: u.Unreachable, Services: u.Catalog.Services,
			})
			l.schedule()
		case kvu := <-kvUpdates:
			l.kvDocs = &kvu
			l.reloadPolicy("kv")
		case <-l.d.reload:
			l.reloadPolicy("files")
		case <-l.timer.C:
			l.build(ctx)
		}
	}
}

// schedule arms the build timer for a change. A change after a quiet
// period (no build for a hold-off) builds at once — a lone health flip
// should not wait for a burst that is not coming; changes within a
// hold-off of a build coalesce until a hold-off after the latest one,
// capped at MaxDelay after the burst began. Builds are therefore at least
// a hold-off apart: at most one push per proxy per window.
func (l *loop) schedule() {
	now := time.Now()
	if l.burstStart.IsZero() {
		l.burstStart = now
		if now.Sub(l.lastBuild) >= l.d.cfg.Settings.XDS.DebounceHoldOff {
			l.timer.Reset(0)
			return
		}
	}
	wait := min(l.d.cfg.Settings.XDS.DebounceHoldOff, l.burstStart.Add(l.d.cfg.Settings.XDS.DebounceMaxDelay).Sub(now))
	wait = max(wait, l.lastBuild.Add(l.d.cfg.Settings.XDS.DebounceHoldOff).Sub(now), 0)
	l.timer.Reset(wait)
}

func (l *loop) build(ctx context.Context) {
	l.burstStart = time.Time{}
	l.lastBuild = time.Now()
	if l.catalog == nil || (l.kvNeeded && l.kvDocs == nil) || l.policy == nil && l.kvNeeded {
		return
	}
	if len(l.catalog.Pending) > 0 && l.d.ready.Load() {
		if l.pendingSince.IsZero() {
			l.pendingSince = time.Now()
		}
		if time.Since(l.pendingSince) < pendingGrace {
			l.timer.Reset(l.d.cfg.Settings.XDS.DebounceHoldOff)
			return
		}
		l.d.log.Warn().Strs("services", keys(l.catalog.Pending)).Msg("services still loading after grace period; serving without them")
	}
	l.pendingSince = time.Time{}
	start := time.Now()
	cat := l.catalog.Catalog
	if until := time.Unix(0, l.d.holdUntil.Load()); start.Before(until) {
		var held int
		cat, held = model.HoldDowngrades(l.served, cat)
		if held > 0 {
			l.d.log.Info().Int("instances", held).Time("until", until).Msg("holding health downgrades after Consul reconnect")
			// Rebuild when the window ends, with the real state.
			l.timer.Reset(until.Sub(start) + time.Millisecond)
		}
	}
	m, warnings := model.Build(cat, l.policy)
	l.logNewWarnings(warnings)
	if l.translator == nil {
		l.translator = xds.NewTranslator()
	}
	out, err := l.translator.Translate(m)
	l.d.metrics.translate.Observe(time.Since(start).Seconds())
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
	pol := l.policy
	resolve := func(nodeCluster string) string {
		if p := pol.ProxyFor(nodeCluster); p != nil {
			return p.Name
		}
		return ""
	}
	changed, err := l.d.xds.Update(ctx, out, resolve)
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
	l.d.metrics.builds.Inc()
	if !l.changedAt.IsZero() && len(changed) > 0 {
		l.d.metrics.changeToPush.Observe(time.Since(l.changedAt).Seconds())
	}
	if !l.d.ready.Swap(true) {
		l.d.log.Info().Int("clusters", len(out.Shared.Clusters)).Int("groups", len(out.Groups)).
			Msg("first complete Consul sync served; ready")
	}
	if len(changed) > 0 {
		ev := l.d.log.Info().Strs("types", changed).Int("clusters", len(out.Shared.Clusters))
		if !l.changedAt.IsZero() {
			ev = ev.Dur("since_consul_change", time.Since(l.changedAt))
		}
		ev.Msg("snapshot updated")
	}
	l.changedAt = time.Time{}
	l.served = cat
	l.setStatus(func(st *PolicyStatus) { st.Warnings = warnings })
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
// one keeps serving.
func (l *loop) reloadPolicy(trigger string) {
	if l.kvNeeded && l.kvDocs == nil {
		return // the first KV read will load everything
	}
	docs, diags, sources := l.readDocuments()
	var attempted *policy.Policy
	if !diags.HasErrors() {
		cfg, ds := policy.Merge(docs...)
		diags = append(diags, ds...)
		if !diags.HasErrors() {
			// The certificates, keys and CAs tls blocks name are part of
			// the policy: a missing or broken one rejects the reload like
			// a broken document, and the last good secrets keep serving.
			attempted = cfg.Policy
			diags = append(diags, cfg.Policy.ReadFiles(time.Now())...)
		}
		if !diags.HasErrors() {
			// Accepted only if it can be served: built and translated
			// against the current catalog, every resource valid.
			var cat *consul.Catalog
			if l.catalog != nil {
				cat = l.catalog.Catalog
			}
			if l.translator == nil {
				l.translator = xds.NewTranslator()
			}
			diags = append(diags, CheckTranslation(cat, cfg.Policy, l.translator)...)
		}
		if !diags.HasErrors() {
			if cfg.Settings != l.d.cfg.Settings {
				l.d.log.Warn().Msg("daemon settings (consul, xds, admin, log blocks) changed; restart to apply them")
			}
			l.policy = cfg.Policy
			l.d.watchPolicyFiles(cfg.Policy)
			l.watcher.SetTargets(model.WatchTargets(cfg.Policy))
			l.recordPolicy(append(sources, tlsSources(cfg.Policy)...), diags)
			l.d.metrics.reloads.WithLabelValues("ok").Inc()
			l.d.log.Info().Str("trigger", trigger).Int("sources", len(sources)).Msg("policy loaded")
			l.schedule()
			return
		}
	}
	// Keep watching the files of the rejected policy too, so that
	// fixing (or creating) the file it could not use reloads by itself.
	l.d.watchPolicyFiles(l.policy, attempted)
	lines := policy.FormatDiagnostics(diags)
	l.d.metrics.reloads.WithLabelValues("failed").Inc()
	l.d.log.Error().Str("trigger", trigger).Strs("diagnostics", lines).Msg("policy rejected; keeping the last good policy")
	l.setStatus(func(st *PolicyStatus) {
		st.LastError = &ReloadError{At: time.Now(), Diagnostics: lines}
		st.FailedReloads++
	})
}

func (l *loop) readDocuments() ([]*policy.Document, hclDiagnostics, []SourceStatus) {
	var (
		docs    []*policy.Document
		diags   hclDiagnostics
		sources []SourceStatus
	)
	for _, f := range l.d.cfg.ConfigFiles {
		src, err := os.ReadFile(f)
		if err != nil {
			diags = append(diags, readError(f, err))
			continue
		}
		doc, ds := policy.Parse(f, src)
		diags = append(diags, ds...)
		if doc != nil {
			docs = append(docs, doc)
		}
		sources = append(sources, SourceStatus{Name: f, Kind: "file", Hash: hash(src)})
	}
	if l.kvDocs != nil {
		for _, r := range l.kvDocs.Rejected {
			diags = append(diags, kvRejected(r))
		}
		for _, kd := range l.kvDocs.Documents {
			doc, ds := policy.ParseKV(kd.Key, kd.Value)
			diags = append(diags, ds...)
			if doc != nil {
				docs = append(docs, doc)
			}
			sources = append(sources, SourceStatus{Name: kd.Key, Kind: "kv", Hash: hash(kd.Value), ModifyIndex: kd.ModifyIndex})
		}
	}
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
		st.LoadedAt = time.Now()
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

// listen accepts host:port or unix:///path. A stale socket file from a
// previous run is removed so a restart does not fail with "address in use".
func listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(path)
		}
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}
