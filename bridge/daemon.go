// Package bridge runs the daemon around the pipeline: it watches Consul's
// catalog (and KV and config entries for policy), debounces changes, has
// package pipeline compute the served world (loop.go), gates and applies
// policy reloads (reload.go), and serves the world over xDS, with
// readiness, an admin API, the console and metrics. Computing the world
// itself is package pipeline's; nothing here composes its stages.
package bridge

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/unixsock"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
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
	// Clock is the daemon's time (debounce, Consul outage and hold
	// windows); nil is the real clock. Tests pass a fake one.
	Clock clockwork.Clock
	// Query tunes Consul blocking queries; zero fields take defaults, and
	// the datacenter, stale and wait time come from Settings.
	Query consul.QueryOptions
	// Registry receives the daemon's metrics, served on /metrics; nil makes
	// a private one.
	Registry *prometheus.Registry
	// CPUTime is the process's CPU time so far, which tells the idle
	// collector when the bridge is idle (idlegc.go); nil reads it from the
	// OS. Tests pass a fake.
	CPUTime func() time.Duration
}

// Daemon runs the whole pipeline: Consul and policy watches, debounce,
// build, translate, and the xDS and admin servers.
type Daemon struct {
	cfg   Config
	log   zerolog.Logger
	clock clockwork.Clock
	// cpuTime is Config.CPUTime or the OS's.
	cpuTime func() time.Duration
	xds     *serve.Server

	started   chan struct{}
	xdsAddr   net.Addr
	adminAddr net.Addr
	// adminTokenPath and adminToken are set by Run before Started closes
	// (adminauth.go); never logged.
	adminTokenPath, adminToken string
	// planSlot lets one plan run at a time; planParser is the plans'
	// shared, budgeted parser (planapi.go).
	planSlot   chan struct{}
	planParser *docParser
	reload     chan struct{}
	// policyFiles carries the files the policy names (certificates,
	// keys, CAs) from the loop to watchFiles after every reload.
	policyFiles chan []string

	ready atomic.Bool
	// buildPending is set while a change waits for its build (the loop's
	// debounce window) and during the build; buildsDone counts builds.
	// Both for the idle collector: a fan-out starts as a build ends.
	buildPending atomic.Bool
	buildsDone   atomic.Uint64
	status       atomic.Pointer[PolicyStatus]
	catalog      atomic.Pointer[catalogView]
	// planBase is what the last good build used, for the console's plan
	// and the catalog's "used by" (see console.go).
	planBase atomic.Pointer[planBase]
	reg      *prometheus.Registry
	metrics  *metrics

	// outages follows whether each datacenter's Consul answers, and the
	// hold windows after real outages.
	outages *outages
	// history is the console's recent history (history.go).
	history history
}

// consulQuery records every Consul request's outcome for metrics, for
// readiness (an unreachable local Consul does not stop serving, but after
// stale_after an operator should know the world may have moved on) and
// for the hold after an outage. datacenter is "" for the local one.
func (d *Daemon) consulQuery(endpoint, datacenter string, err error, dur time.Duration) {
	d.metrics.consulQuery(endpoint, err, dur)
	if down := d.outages.record(datacenter, err, d.clock.Now(), d.ready.Load()); down > 0 {
		d.log.Info().Str("datacenter", cmp.Or(datacenter, "(local)")).Dur("unreachable_for", down).
			Dur("hold", d.cfg.Settings.Consul.ReconnectHold).
			Msg("Consul is back; holding back its instances' health downgrades and removals while it settles")
	}
}

// localDC maps the datacenter a catalog service was read from to the
// outage tracker's key: "" for the local datacenter.
func (d *Daemon) localDC(dc string) string {
	if dc == d.cfg.Settings.Consul.Datacenter {
		return ""
	}
	return dc
}

// consulStale says why readiness should fail because of the local
// Consul, or "".
func (d *Daemon) consulStale() string {
	since, lastOK := d.outages.failing("")
	if since.IsZero() {
		return ""
	}
	down := d.clock.Since(since)
	if down < d.cfg.Settings.Consul.StaleAfter {
		return ""
	}
	last := "never"
	if !lastOK.IsZero() {
		last = lastOK.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("Consul at %s unreachable for %s (last successful request: %s; last error: %v); serving the last known state",
		d.consulAddress(), down.Round(time.Second), last, d.outages.lastError(""))
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
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.CPUTime == nil {
		cfg.CPUTime = processCPU
	}
	d := &Daemon{
		reg:     reg,
		cfg:     cfg,
		clock:   cfg.Clock,
		cpuTime: cfg.CPUTime,
		outages: newOutages(cfg.Settings.Consul.ReconnectHoldAfter, cfg.Settings.Consul.ReconnectHold),
		log:     cfg.Logger.With().Str("component", "bridge").Logger(),
		xds: serve.NewServer(serve.ServerConfig{
			Logger:          cfg.Logger,
			Registerer:      reg,
			TLS:             serve.TLSFiles(cfg.Settings.XDS.TLS),
			AuthorizeNodes:  cfg.Settings.XDS.AuthorizeNodes,
			MaxInitialSyncs: cfg.Settings.XDS.MaxInitialSyncs,
			Sidecars:        meshWanted(cfg.Policy),
		}),
		started:     make(chan struct{}),
		planSlot:    make(chan struct{}, 1),
		planParser:  newDocParser(cfg.Clock, ParseBudget),
		reload:      make(chan struct{}, 1),
		policyFiles: make(chan []string, 1),
	}
	d.status.Store(&PolicyStatus{})
	d.metrics = newMetrics(reg, d.notReadyReason, func() bool { return d.outages.up("", d.clock.Now()) })
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
func (d *Daemon) Policy() *PolicyStatus {
	st := d.status.Load().redacted()
	st.Running = &RunningSettings{Settings: d.cfg.Settings, FollowsConnect: meshWanted(d.cfg.Policy)}
	return st
}

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
	if err := d.checkKeyTransport(); err != nil {
		return err
	}
	xdsLis, err := listen(s.XDS.Listen, s.XDS.SocketMode, s.XDS.SocketGroup)
	if err != nil {
		return fmt.Errorf("xds listen on %s: %w", s.XDS.Listen, err)
	}
	if strings.HasPrefix(s.XDS.Listen, "unix://") && s.XDS.SocketMode&0o007 != 0 {
		// Every local user may connect and claim any node: say so, as a
		// TCP port on 0.0.0.0 would be obvious.
		d.log.Warn().Str("setting", "xds.socket_mode").Str("mode", fmt.Sprintf("%#o", s.XDS.SocketMode)).
			Msg("the xDS socket lets every local user connect and claim any node (no private key is sent over it); use 0660 with socket_group")
	}
	adminLis, err := listen(s.Admin.Listen, 0, "")
	if err != nil {
		xdsLis.Close()
		return fmt.Errorf("admin listen on %s: %w", s.Admin.Listen, err)
	}
	if err := d.loadAdminToken(); err != nil {
		xdsLis.Close()
		adminLis.Close()
		return err
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
	stats, own := watcher.QueryStats, watcher.OwnSlots
	d.metrics.queryStats.Store(&stats)
	d.metrics.ownSlots.Store(&own)
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
	// A frozen Consul answers no blocking query until its wait runs out;
	// a short, non-blocking probe makes it visible within stale_after.
	interval := min(max(s.Consul.StaleAfter/4, time.Second), 5*time.Second)
	wg.Go(func() {
		consul.Probe(ctx, client, interval, min(interval, 2*time.Second), func(started time.Time, err error) {
			d.metrics.consulQuery("status_leader", err, time.Since(started))
			if err != nil {
				// Unreachable since the request started, not since its
				// timeout ran out.
				d.outages.probed("", err, started, d.ready.Load())
				return
			}
			d.outages.probed("", nil, d.clock.Now(), d.ready.Load())
		})
	})
	if s.Consul.Register != nil {
		wg.Go(func() { d.register(ctx, client, d.xdsAddr) })
	}
	if s.XDS.CollectWhenIdle {
		wg.Go(func() {
			newIdleCollector(d.log, d.clock, d.cpuTime, d.buildActivity, d.xds.StreamCounts, d.metrics.idleGCs.Inc, d.metrics.idleReleases.Inc).run(ctx)
		})
	}
	wg.Go(func() { fail(d.watchFiles(ctx)) })
	wg.Go(func() { fail(d.xds.Serve(ctx, xdsLis)) })
	wg.Go(func() { fail(d.serveAdmin(ctx, adminLis)) })
	wg.Go(func() { d.sampleHistory(ctx) })
	var ce configEntries
	mesh := meshState{needed: meshWanted(d.cfg.Policy), central: centralMesh(d.cfg.Policy)}
	if kinds := configKinds(s.Consul.ConfigEntries, mesh.needed); len(kinds) > 0 {
		// One watcher for the policy's kinds and the mesh's, so a kind
		// both read (service-defaults) is one query.
		cw := consul.NewConfigEntriesWatcher(consul.ConfigEntriesConfig{Client: client, Kinds: kinds, Query: q, Logger: consulLog, OnQuery: d.consulQuery})
		ce = configEntries{needed: s.Consul.ConfigEntries, mesh: mesh.needed, updates: cw.Updates(), log: d.log}
		wg.Go(func() { fail(cw.Run(ctx)) })
	}
	var meshUpdates <-chan consul.MeshUpdate
	var mw *consul.MeshWatcher
	if mesh.needed {
		mw = consul.NewMeshWatcher(consul.MeshConfig{Client: client, Query: q, Central: mesh.central, Budget: watcher, Targets: model.MeshWatchTargets(d.cfg.Policy), Logger: consulLog, OnQuery: d.consulQuery})
		meshUpdates = mw.Updates()
		wg.Go(func() { fail(mw.Run(ctx)) })
	}
	wg.Go(func() {
		l := &loop{d: d, watcher: watcher, policy: d.cfg.Policy, kvNeeded: kv != nil, ce: ce,
			policyEntries: s.Consul.ConfigEntries, mesh: mesh, meshUpdates: meshUpdates, meshWatcher: mw,
			// What the mesh watcher starts with (MeshConfig.Targets).
			meshTargets: model.MeshWatchTargets(d.cfg.Policy), meshTargetsSet: mw != nil}
		l.run(ctx, watcher.Updates(), kvUpdates)
	})
	wg.Wait()
	return firstErr
}

// buildActivity is whether a build is pending or running, and how many
// have run (idlegc.go).
func (d *Daemon) buildActivity() (bool, uint64) { return d.buildPending.Load(), d.buildsDone.Load() }

// listen accepts host:port or unix:///path; a socket gets mode and group
// (unixsock: a stale socket from a previous run is replaced).
func listen(addr string, mode os.FileMode, group string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		return unixsock.Listen(path, mode, group)
	}
	return net.Listen("tcp", addr)
}

// checkKeyTransport refuses to start when the policy would send private
// keys over an xDS connection that does not authenticate who receives
// them (policy.CheckKeyTransport); with xds.insecure_serve_keys it warns
// instead, at every start.
func (d *Daemon) checkKeyTransport() error {
	s := d.cfg.Settings.XDS
	if diags := policy.CheckKeyTransport(s, d.cfg.Policy); diags.HasErrors() {
		return fmt.Errorf("refusing to start: %s", strings.Join(policy.FormatDiagnostics(diags), "; "))
	}
	if problem := policy.KeyTransportProblem(s); s.InsecureServeKeys && problem != "" {
		ev := d.log.Warn().Str("setting", "xds.insecure_serve_keys").Str("problem", problem)
		if n := len(d.cfg.Policy.PrivateKeys()); n > 0 {
			ev = ev.Int("private_keys_served", n)
		}
		ev.Msg("lab-only setting on: private keys may reach proxies that are not authenticated; never use it in production")
	}
	return nil
}
