package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// Config configures a Daemon.
type Config struct {
	Settings policy.Settings
	Policy   *policy.Policy
	Logger   zerolog.Logger
	// HoldOff is how long the daemon waits after a catalog change for more
	// changes before it builds; MaxDelay caps the total wait during a
	// continuous burst. Defaults: 100ms and 1s.
	HoldOff, MaxDelay time.Duration
	// Query tunes Consul blocking queries; zero fields take defaults, and
	// the datacenter, stale and wait time come from Settings.
	Query consul.QueryOptions
}

// Daemon runs the whole pipeline: Consul watches, debounce, build,
// translate, and the xDS and admin servers.
type Daemon struct {
	cfg Config
	log zerolog.Logger
	xds *xds.Server

	started   chan struct{}
	xdsAddr   net.Addr
	adminAddr net.Addr

	ready     atomic.Bool
	builds    atomic.Uint64
	lastWarns []string
}

// New returns a daemon; nothing runs until Run.
func New(cfg Config) *Daemon {
	if cfg.HoldOff <= 0 {
		cfg.HoldOff = 100 * time.Millisecond
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = time.Second
	}
	return &Daemon{
		cfg:     cfg,
		log:     cfg.Logger.With().Str("component", "bridge").Logger(),
		xds:     xds.NewServer(xds.ServerConfig{Logger: cfg.Logger}),
		started: make(chan struct{}),
	}
}

// Started is closed once the xDS and admin listeners are open.
func (d *Daemon) Started() <-chan struct{} { return d.started }

// XDSAddr is the address xDS is served on; valid after Started.
func (d *Daemon) XDSAddr() net.Addr { return d.xdsAddr }

// AdminAddr is the admin HTTP address; valid after Started.
func (d *Daemon) AdminAddr() net.Addr { return d.adminAddr }

// Ready reports whether the first complete Consul sync has been served.
func (d *Daemon) Ready() bool { return d.ready.Load() }

// Run serves until ctx ends or a server fails.
func (d *Daemon) Run(ctx context.Context) error {
	s := d.cfg.Settings
	client, err := consul.NewClient(consul.ClientConfig{
		Address:    s.Consul.Address,
		Datacenter: s.Consul.Datacenter,
		TokenFile:  s.Consul.TokenFile,
	})
	if err != nil {
		return err
	}
	xdsLis, err := listen(s.XDS.Listen)
	if err != nil {
		return fmt.Errorf("xds listen: %w", err)
	}
	adminLis, err := listen(s.Admin.Listen)
	if err != nil {
		xdsLis.Close()
		return fmt.Errorf("admin listen: %w", err)
	}
	d.xdsAddr, d.adminAddr = xdsLis.Addr(), adminLis.Addr()
	close(d.started)

	q := d.cfg.Query
	q.Datacenter, q.Stale, q.WaitTime = s.Consul.Datacenter, s.Consul.Stale, s.Consul.WaitTime
	watcher := consul.NewWatcher(consul.Config{
		Client: client,
		Query:  q,
		Logger: d.cfg.Logger.With().Str("component", "consul").Logger(),
	})

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
	wg.Go(func() { fail(d.xds.Serve(ctx, xdsLis)) })
	wg.Go(func() { fail(d.serveAdmin(ctx, adminLis)) })
	wg.Go(func() { d.loop(ctx, watcher.Updates()) })
	wg.Wait()
	return firstErr
}

// loop debounces catalog updates and builds. Its states:
//   - idle: nothing pending, no timer;
//   - pending: an update arrived; the timer fires HoldOff after the latest
//     one, but never later than MaxDelay after the first of the burst;
//   - build: on the timer, the newest update is built and served.
//
// Before the first complete sync, incomplete updates are dropped: a proxy
// must never be answered with a partial world.
func (d *Daemon) loop(ctx context.Context, updates <-chan consul.Update) {
	var (
		pending    *consul.Update
		burstStart time.Time
		timer      = time.NewTimer(time.Hour)
	)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-updates:
			if !u.Complete && !d.ready.Load() {
				continue
			}
			if pending != nil && pending.ChangedAt.Before(u.ChangedAt) {
				u.ChangedAt = pending.ChangedAt
			}
			pending = &u
			now := time.Now()
			if burstStart.IsZero() {
				burstStart = now
			}
			timer.Reset(min(d.cfg.HoldOff, burstStart.Add(d.cfg.MaxDelay).Sub(now)))
		case <-timer.C:
			if pending != nil {
				d.build(ctx, *pending)
			}
			pending, burstStart = nil, time.Time{}
		}
	}
}

func (d *Daemon) build(ctx context.Context, u consul.Update) {
	model, warnings := Build(u.Catalog, d.cfg.Policy)
	d.logNewWarnings(warnings)
	res, err := xds.Translate(model)
	if err != nil {
		d.log.Error().Err(err).Msg("translation failed; keeping the last good snapshot")
		return
	}
	changed, err := d.xds.SetResources(ctx, res, nil)
	if err != nil {
		d.log.Error().Err(err).Msg("setting snapshot failed; keeping the last good snapshot")
		return
	}
	d.builds.Add(1)
	if !d.ready.Swap(true) {
		d.log.Info().Int("clusters", len(res.Clusters)).Msg("first complete Consul sync served; ready")
	}
	if len(changed) > 0 {
		d.log.Info().Strs("types", changed).Int("clusters", len(res.Clusters)).
			Dur("since_consul_change", time.Since(u.ChangedAt)).Msg("snapshot updated")
	}
}

// logNewWarnings logs each catalog warning once, not on every rebuild.
func (d *Daemon) logNewWarnings(warnings []string) {
	for _, w := range warnings {
		if !slices.Contains(d.lastWarns, w) {
			d.log.Warn().Str("warning", w).Msg("odd catalog data")
		}
	}
	d.lastWarns = warnings
}

// serveAdmin serves the admin HTTP API; more endpoints join it as the
// operator surface grows.
func (d *Daemon) serveAdmin(ctx context.Context, lis net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"status":"ok"}`)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if d.Ready() {
			fmt.Fprintln(w, `{"ready":true}`)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, `{"ready":false,"reason":"waiting for the first complete Consul sync"}`)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	d.log.Info().Str("addr", lis.Addr().String()).Msg("serving admin HTTP")
	select {
	case err := <-errc:
		return fmt.Errorf("admin server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("admin shutdown: %w", err)
	}
	return nil
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
