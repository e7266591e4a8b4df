// Command fakeenvoy is a test-only stand-in for Envoy, built by the agent's
// lifecycle tests (no Envoy binary can be installed where they run). It is
// written from Envoy's documentation, not from what the agent does:
//
//   - Command line (operations/cli): --hot-restart-version (prints the
//     binary's hot restart compatibility version, also GET
//     /hot_restart_version), -c/--config-path, --restart-epoch,
//     --base-id, --drain-time-s, --parent-shutdown-time-s,
//     --drain-strategy (gradual|immediate), --concurrency, --socket-path
//     (a file path: the socket file, made --socket-mode, default 600),
//     -l/--log-level. An unknown flag is a parse error (exit 1), as in
//     Envoy.
//   - Bootstrap: the admin listener is admin.address.socket_address; ADS
//     is dynamic_resources.ads_config's envoy_grpc cluster, whose static
//     endpoint may be a pipe (Unix socket); node is the node.
//   - Server states (admin.v3.ServerInfo.State): PRE_INITIALIZING, then
//     INITIALIZING until the first CDS and LDS are accepted, then LIVE.
//   - Admin (operations/admin): GET /ready ("LIVE", 200; else the state,
//     503), GET /server_info (version, state, hot_restart_version,
//     command_line_options, node), GET /stats/prometheus, POST
//     /drain_listeners[?graceful][&inboundonly], POST /quitquitquit;
//     a mutation by GET gets 400, as "All mutations must be sent as HTTP
//     POST".
//   - Hot restart (intro/arch_overview/operations/hot_restart): epoch
//     N+1 talks to epoch N over a Unix domain socket; it takes over the
//     admin port first, fully initializes, asks for copies of the listen
//     sockets, starts listening, tells the parent to drain, and after
//     --parent-shutdown-time-s tells it to shut down. Epoch 0 starts fresh;
//     an epoch > 0 without a parent fails to start. The RPC here is JSON
//     lines on an abstract Unix socket named after --socket-path, the base
//     id and the epoch, and sockets pass with SCM_RIGHTS: the same shape
//     as Envoy's protobuf RPC, not its wire format.
//   - Draining (intro/arch_overview/operations/draining): drain_listeners
//     without graceful stops accepting at once; with graceful, connections
//     are discouraged (Connection: close) for --drain-time-s and new ones
//     still accepted until then.
//
// Test knobs (not Envoy's): --x-fake-record FILE appends one JSON line per
// event (start with the arguments, live, admin requests, drain, exit);
// --x-fake-listen ADDR is a "listener" answering HTTP with its epoch (the
// stand-in for listeners from LDS); --x-fake-never-live stays
// INITIALIZING; --x-fake-initial-fetch-timeout D goes LIVE after D
// without its first config, as Envoy does when a config source's
// initial_fetch_timeout expires; --x-fake-exit-after D exits 1 after D;
// --x-fake-admin-delay D makes an epoch > 0 wait D before taking over
// the admin port from its parent; --x-fake-stats TEXT is appended to /stats/prometheus, and
// --x-fake-stats-pad N pads it by about N bytes; --x-fake-version V
// is /server_info's version.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	// Types a bootstrap's typed configs name, as Envoy links them in.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"
)

// hotRestartVersion is this build's hot restart compatibility version
// (tests build an incompatible one with -ldflags -X).
var hotRestartVersion = "11.104"

type options struct {
	config, socketPath, socketMode, drainStrategy, logLevel string
	epoch, baseID, drainTime, parentShutdown                int
	concurrency, statsPad                                   int
	record, listen, stats, version                          string
	neverLive, hotRestartVersion                            bool
	exitAfter, initialFetchTimeout, adminDelay              time.Duration
}

func parse(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("envoy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.config, "c", "", "")
	fs.StringVar(&o.config, "config-path", "", "")
	fs.IntVar(&o.epoch, "restart-epoch", 0, "")
	fs.IntVar(&o.baseID, "base-id", 0, "")
	fs.IntVar(&o.drainTime, "drain-time-s", 600, "")
	fs.IntVar(&o.parentShutdown, "parent-shutdown-time-s", 900, "")
	fs.StringVar(&o.drainStrategy, "drain-strategy", "gradual", "")
	fs.IntVar(&o.concurrency, "concurrency", 0, "")
	fs.StringVar(&o.socketPath, "socket-path", "@envoy_domain_socket", "")
	fs.StringVar(&o.socketMode, "socket-mode", "", "")
	fs.StringVar(&o.logLevel, "l", "info", "")
	fs.StringVar(&o.logLevel, "log-level", "info", "")
	fs.StringVar(&o.record, "x-fake-record", "", "")
	fs.StringVar(&o.listen, "x-fake-listen", "", "")
	fs.StringVar(&o.stats, "x-fake-stats", "", "")
	fs.IntVar(&o.statsPad, "x-fake-stats-pad", 0, "")
	fs.StringVar(&o.version, "x-fake-version", "fake0000/1.31.2/Clean/RELEASE/BoringSSL", "")
	fs.BoolVar(&o.neverLive, "x-fake-never-live", false, "")
	fs.BoolVar(&o.hotRestartVersion, "hot-restart-version", false, "")
	fs.DurationVar(&o.exitAfter, "x-fake-exit-after", 0, "")
	fs.DurationVar(&o.adminDelay, "x-fake-admin-delay", 0, "")
	fs.DurationVar(&o.initialFetchTimeout, "x-fake-initial-fetch-timeout", 0, "")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.hotRestartVersion {
		return o, nil
	}
	if o.config == "" {
		return nil, fmt.Errorf("at least one of --config-path or --config-yaml or Options::configProto() should be non-empty")
	}
	// "This flag may not be used when --socket-path is start with "@"
	// or not set"; a valid octal file permission, default 600.
	if o.socketMode != "" && strings.HasPrefix(o.socketPath, "@") {
		return nil, fmt.Errorf("error: --socket-mode may not be used with an abstract --socket-path %q", o.socketPath)
	}
	if o.socketMode == "" {
		o.socketMode = "600"
	}
	if _, err := strconv.ParseUint(o.socketMode, 8, 32); err != nil {
		return nil, fmt.Errorf("error: --socket-mode %q is not an octal file permission", o.socketMode)
	}
	if o.drainStrategy != "gradual" && o.drainStrategy != "immediate" {
		return nil, fmt.Errorf("error: unknown drain strategy %q", o.drainStrategy)
	}
	if o.parentShutdown <= o.drainTime {
		// Envoy documents the parent shutdown as following the drain.
		fmt.Fprintf(os.Stderr, "warning: --parent-shutdown-time-s %d is not after --drain-time-s %d\n", o.parentShutdown, o.drainTime)
	}
	return o, nil
}

func main() {
	o, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "PARSE ERROR: %v\n", err)
		os.Exit(1)
	}
	if o.hotRestartVersion {
		// "Outputs an opaque hot restart compatibility version for the
		// binary", to match against GET /hot_restart_version.
		fmt.Fprintln(os.Stderr, hotRestartVersion) // as Envoy: std::cerr (options_impl.cc)
		return
	}
	e := &envoy{o: o, state: "PRE_INITIALIZING", pid: os.Getpid()}
	var consulEnv []string // names only: which of Consul's variables reached Envoy
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "CONSUL_") {
			consulEnv = append(consulEnv, name)
		}
	}
	e.record("start", map[string]any{"args": os.Args[1:], "consul_env": consulEnv})
	if err := e.run(); err != nil {
		e.record("exit", map[string]any{"error": err.Error()})
		fmt.Fprintf(os.Stderr, "critical: %v\n", err)
		os.Exit(1)
	}
}

type envoy struct {
	o   *options
	pid int
	bs  *bootstrapv3.Bootstrap

	mu       sync.Mutex
	state    string
	draining bool
	admin    *http.Server
	traffic  net.Listener // nil without --x-fake-listen
	quit     chan string
	recMu    sync.Mutex
}

// record appends one event to the record file.
func (e *envoy) record(event string, fields map[string]any) {
	if e.o.record == "" {
		return
	}
	if fields == nil {
		fields = map[string]any{}
	}
	fields["event"], fields["pid"], fields["epoch"], fields["t"] = event, e.pid, e.o.epoch, time.Now().UnixMilli()
	b, _ := json.Marshal(fields)
	e.recMu.Lock()
	defer e.recMu.Unlock()
	f, err := os.OpenFile(e.o.record, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	_, _ = f.Write(append(b, '\n'))
	_ = f.Close()
}

func (e *envoy) setState(s string) {
	e.mu.Lock()
	e.state = s
	e.mu.Unlock()
	e.record("state", map[string]any{"state": s})
}

func (e *envoy) run() error {
	src, err := os.ReadFile(e.o.config)
	if err != nil {
		return fmt.Errorf("unable to read file: %s", e.o.config)
	}
	js, err := yaml.YAMLToJSON(src)
	if err != nil {
		return fmt.Errorf("unable to convert YAML as JSON: %w", err)
	}
	e.bs = &bootstrapv3.Bootstrap{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(js, e.bs); err != nil {
		return fmt.Errorf("unable to parse JSON as proto: %w", err)
	}
	e.quit = make(chan string, 4)
	// A new epoch finds its parent first: it takes over the admin port.
	var parent *parentConn
	if e.o.epoch > 0 {
		if parent, err = dialParent(e.o); err != nil {
			return err
		}
		time.Sleep(e.o.adminDelay) // a slow start: the parent keeps the admin port meanwhile
		if err := parent.call("shutdown_admin"); err != nil {
			return fmt.Errorf("hot restart: shutdown_admin: %w", err)
		}
		e.record("parent_admin_shut_down", nil)
	}
	if err := e.listenRPC(); err != nil {
		return err
	}
	if err := e.serveAdmin(); err != nil {
		return err
	}
	if e.o.exitAfter > 0 {
		time.AfterFunc(e.o.exitAfter, func() { e.quit <- "crash" })
	}
	e.setState("INITIALIZING")
	go func() {
		fetched := make(chan error, 1)
		go func() { fetched <- e.initialize() }()
		var timeout <-chan time.Time
		if e.o.initialFetchTimeout > 0 {
			timeout = time.After(e.o.initialFetchTimeout)
		}
		select {
		case err := <-fetched:
			if err != nil {
				e.record("init_error", map[string]any{"error": err.Error()})
				return
			}
		case <-timeout:
			// Envoy moves on with initialization when a config source's
			// initial_fetch_timeout expires (ConfigSource docs).
			e.record("initial_fetch_timeout", nil)
		}
		if e.o.neverLive {
			return
		}
		e.setState("LIVE")
		if err := e.takeListeners(parent); err != nil {
			e.record("listen_error", map[string]any{"error": err.Error()})
		}
		if parent != nil {
			_ = parent.call("drain_listeners")
			e.record("told_parent_to_drain", nil)
			time.AfterFunc(time.Duration(e.o.parentShutdown)*time.Second, func() {
				_ = parent.call("terminate")
				e.record("told_parent_to_terminate", nil)
				parent.close()
			})
		}
	}()
	why := <-e.quit
	e.record("exit", map[string]any{"why": why})
	if why == "crash" {
		os.Exit(1)
	}
	return nil
}

// adminHandler serves the admin paths this stand-in knows.
func (e *envoy) adminHandler() http.Handler {
	mux := http.NewServeMux()
	post := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				http.Error(w, "This endpoint requires POST (all mutations must be sent as HTTP POST)", http.StatusBadRequest)
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		e.mu.Lock()
		s := e.state
		e.mu.Unlock()
		if s != "LIVE" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, s)
	})
	mux.HandleFunc("/server_info", func(w http.ResponseWriter, _ *http.Request) {
		e.mu.Lock()
		s := e.state
		e.mu.Unlock()
		node, _ := protojson.Marshal(e.bs.GetNode())
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"version": e.o.version, "state": s, "hot_restart_version": hotRestartVersion, "node": json.RawMessage(node),
			"command_line_options": map[string]any{
				"base_id": fmt.Sprint(e.o.baseID), "restart_epoch": e.o.epoch, "concurrency": e.o.concurrency,
				"drain_time": fmt.Sprintf("%ds", e.o.drainTime), "parent_shutdown_time": fmt.Sprintf("%ds", e.o.parentShutdown),
				"drain_strategy": strings.ToUpper(e.o.drainStrategy),
			},
		})
	})
	mux.HandleFunc("/hot_restart_version", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, hotRestartVersion) })
	mux.HandleFunc("/stats/prometheus", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# TYPE envoy_server_hot_restart_epoch gauge\nenvoy_server_hot_restart_epoch{} %d\n", e.o.epoch)
		fmt.Fprintf(w, "# TYPE envoy_server_live gauge\nenvoy_server_live{} %d\n", boolInt(e.live()))
		fmt.Fprintf(w, "# TYPE envoy_cluster_upstream_rq_total counter\nenvoy_cluster_upstream_rq_total{envoy_cluster_name=\"xds_cluster\"} 7\n")
		if e.o.stats != "" {
			fmt.Fprintln(w, e.o.stats)
		}
		for i := 0; i < e.o.statsPad/64; i++ { // 64-byte samples
			fmt.Fprintf(w, "envoy_pad{i=\"%040d\"} 1\n", i)
		}
	})
	mux.HandleFunc("/drain_listeners", post(func(w http.ResponseWriter, r *http.Request) {
		_, graceful := r.URL.Query()["graceful"]
		_, inbound := r.URL.Query()["inboundonly"]
		e.record("drain_listeners", map[string]any{"graceful": graceful, "inboundonly": inbound})
		e.drain(graceful)
		fmt.Fprintln(w, "OK")
	}))
	mux.HandleFunc("/quitquitquit", post(func(w http.ResponseWriter, _ *http.Request) {
		e.record("quitquitquit", nil)
		fmt.Fprintln(w, "OK")
		e.quit <- "quitquitquit"
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	return mux
}

func (e *envoy) live() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.state == "LIVE"
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// serveAdmin binds the bootstrap's admin address.
func (e *envoy) serveAdmin() error {
	sa := e.bs.GetAdmin().GetAddress().GetSocketAddress()
	if sa == nil {
		return fmt.Errorf("the bootstrap has no admin address")
	}
	addr := net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue()))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot bind the admin address %s: %w", addr, err)
	}
	e.record("admin_listening", map[string]any{"addr": addr})
	srv := &http.Server{Handler: e.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
	e.mu.Lock()
	e.admin = srv
	e.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
	return nil
}

// shutdownAdmin closes the admin listener (the child takes the port).
func (e *envoy) shutdownAdmin() {
	e.mu.Lock()
	srv := e.admin
	e.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
	e.record("admin_shut_down", nil)
}
