// Package agent is `consul-xds-bridge agent`: the small daemon beside each
// VM's Consul agent (as Istio's pilot-agent beside each proxy). Local
// Envoys and proxyless gRPC clients connect to it over a Unix socket; it
// relays what the central bridge serves them (relay.go), keeps the last
// good config of every local node.cluster in memory and on disk, and
// serves it at once when a proxy (re)starts while every central replica is
// unreachable.
package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/unixsock"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// Agent relays the central bridge to local proxies.
type Agent struct {
	cfg     *Config
	log     zerolog.Logger
	reg     *prometheus.Registry
	metrics agentMetrics
	server  *serve.Server
	store   store

	ctx     context.Context
	mu      sync.Mutex
	relays  map[string]*relay
	started chan struct{}
	addrs   struct{ socket, tcp, admin net.Addr }
	saves   chan struct{}
	pending map[string]*xds.Resources // to be written to the data directory
	// encoded is each key's resources as the last save encoded them, by
	// object: a change re-encodes only the objects it brought (the relay
	// keeps the others). The save loop's alone.
	encoded map[string]map[proto.Message]*anypb.Any
	connect *connectCerts // nil without connect services
	// sidecars follows the local Connect sidecar registrations (with
	// connect services; sidecars.go).
	sidecars *localSidecars
	// gate vets local streams for Connect leaves (leafgate.go); peers
	// are who may act for each connect service (set by Run).
	gate  *leafGate
	peers map[string]peerSet
	// envoys are the local Envoys the agent runs (envoy blocks).
	envoys *envoys
	consul consulClients
}

type agentMetrics struct {
	connected  prometheus.Gauge
	reconnects prometheus.Counter
}

// New returns an agent for cfg.
func New(cfg *Config, log zerolog.Logger) *Agent {
	if cfg.RelayLinger <= 0 {
		cfg.RelayLinger = DefaultRelayLinger
	}
	if cfg.EnvoyBackoffInitial <= 0 {
		cfg.EnvoyBackoffInitial = time.Second
	}
	if cfg.EnvoyBackoffMax < cfg.EnvoyBackoffInitial {
		cfg.EnvoyBackoffMax = max(30*time.Second, cfg.EnvoyBackoffInitial)
	}
	reg := prometheus.NewRegistry()
	a := &Agent{
		cfg: cfg, log: log.With().Str("component", "agent").Logger(), reg: reg, store: store{dir: cfg.DataDir},
		relays: map[string]*relay{}, started: make(chan struct{}), saves: make(chan struct{}, 1), pending: map[string]*xds.Resources{},
		consul: consulClients{address: cfg.ConsulAddress},
		metrics: agentMetrics{
			connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "consul_xds_bridge_agent_upstream_streams",
				Help: "Streams to the central bridge that are up (one per local node.cluster)."}),
			reconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "consul_xds_bridge_agent_upstream_reconnects_total",
				Help: "Central bridge streams that ended and were reopened, to the same or another replica."}),
		},
	}
	reg.MustRegister(a.metrics.connected, a.metrics.reconnects)
	a.envoys = newEnvoys(reg)
	a.gate = newLeafGate(a, reg)
	if len(cfg.ConnectServices) > 0 {
		a.connect = &connectCerts{a: a, services: cfg.ConnectServices, leaves: map[string]*tlsv3.Secret{}, changed: a.reserveAll}
	}
	if len(cfg.ConnectServices) > 0 {
		a.sidecars = &localSidecars{a: a, warned: map[string]bool{}}
	}
	a.server = serve.NewServer(serve.ServerConfig{
		Logger: log, Registerer: reg, Relay: true, OnKey: a.onKey, OnKeyGone: a.onKeyGone,
		AllowNode: a.allowNode, Sidecars: a.sidecars != nil, StreamInterceptor: a.gate.interceptor(),
	})
	return a
}

// Started is closed once the agent listens.
func (a *Agent) Started() <-chan struct{} { return a.started }

// SocketAddr, TCPAddr and AdminAddr are where the agent listens (after
// Started); TCPAddr is nil without a TCP listener.
func (a *Agent) SocketAddr() net.Addr { return a.addrs.socket }
func (a *Agent) TCPAddr() net.Addr    { return a.addrs.tcp }
func (a *Agent) AdminAddr() net.Addr  { return a.addrs.admin }

// Server is the local xDS server (for /v1/proxies and tests).
func (a *Agent) Server() *serve.Server { return a.server }

// Run serves until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.ctx = ctx
	peers, err := a.cfg.resolvePeers()
	if err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	a.peers = peers
	for _, svc := range a.cfg.ConnectServices {
		a.log.Info().Str("service", svc).Strs("proxy_groups", a.cfg.Leaf[svc].ProxyGroups).Uints32("uids", peers[svc].uids).Uints32("gids", peers[svc].gids).
			Msg("Connect leaf served only to this service's registered sidecar and proxy groups, from these socket peers")
	}
	saved, errs := a.store.loadAll()
	for _, err := range errs {
		a.log.Warn().Err(err).Msg("ignoring a damaged state file")
	}
	for key, anys := range saved {
		a.restore(key, anys)
	}
	var lis []net.Listener
	sock, err := unixsock.Listen(a.cfg.Socket, a.cfg.SocketMode, a.cfg.SocketGroup)
	if err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	// Each connection carries its peer's uid and gid (peercred.go).
	lis = append(lis, credListener{sock})
	a.addrs.socket = sock.Addr()
	a.warnSocket()
	if a.cfg.TCP != "" {
		l, err := net.Listen("tcp", a.cfg.TCP)
		if err != nil {
			return fmt.Errorf("agent tcp listener: %w", err)
		}
		lis = append(lis, l)
		a.addrs.tcp = l.Addr()
	}
	admin, err := net.Listen("tcp", a.cfg.AdminListen)
	if err != nil {
		return fmt.Errorf("agent admin listener: %w", err)
	}
	a.addrs.admin = admin.Addr()
	errc := make(chan error, len(lis)+1)
	var wg sync.WaitGroup
	for _, l := range lis {
		wg.Add(1)
		go func() { defer wg.Done(); errc <- a.server.Serve(ctx, l) }()
	}
	hs := &http.Server{Handler: a.adminMux(), ReadHeaderTimeout: 5 * time.Second}
	go func() { errc <- hs.Serve(admin) }()
	wg.Add(1)
	go func() { defer wg.Done(); a.saveLoop(ctx) }()
	if a.connect != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.connect.run(ctx) }()
	}
	if a.sidecars != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.sidecars.run(ctx) }()
	}
	a.log.Info().Str("socket", a.cfg.Socket).Str("tcp", a.cfg.TCP).Str("admin", a.addrs.admin.String()).
		Int("restored_node_clusters", len(saved)).Msg("agent serving")
	a.startEnvoys()
	close(a.started)
	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
	}
	cancel()
	// Envoys drain (drain_time) while the admin API still answers.
	a.envoys.wait()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = hs.Shutdown(sctx)
	wg.Wait()
	if errors.Is(first, http.ErrServerClosed) {
		first = nil
	}
	return first
}

// maxKeys bounds the node.clusters one agent relays from allow_groups
// patterns: each holds a stream to the central bridge and a copy of its
// config, and local processes choose the strings (within a glob). Groups
// the config names exactly and sidecar groups (from Consul registrations)
// are not counted: the bound never refuses them (bound.go).
const maxKeys = 64

// allowNode vets a local proxy's node when its stream first names it.
func (a *Agent) allowNode(n *corev3.Node) error {
	if a.sidecars != nil && strings.HasPrefix(n.GetCluster(), ir.SidecarGroupPrefix) {
		// Keyed from a connect-proxy registered on this host (clients
		// cannot announce the prefix themselves): its node id is checked.
		if err := a.cfg.allowedID(n.GetId()); err != nil {
			return err
		}
	} else if err := a.cfg.allowed(n.GetId(), n.GetCluster()); err != nil {
		return err
	}
	return a.makeRoom(serve.KeyOf(n))
}

// onKey starts relaying a key the first time a local proxy of it connects.
func (a *Agent) onKey(k serve.RelayKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.relays[k.Key]; r != nil {
		r.stopLinger() // a proxy is back before the relay was dropped
		return
	}
	if a.ctx == nil {
		return
	}
	a.startLocked(newRelay(a, k))
}

// startLocked registers a relay and starts it with its own context, so
// dropping it (dropIdle) ends its upstream stream.
func (a *Agent) startLocked(r *relay) {
	ctx, cancel := context.WithCancel(a.ctx)
	r.cancel = cancel
	a.relays[r.key.Key] = r
	go r.run(ctx)
}

// onKeyGone: the last local stream of a key has gone. Its relay lingers
// (a restarting Envoy gets its config at once and nothing is refetched),
// then, if no proxy of the key came back, it is dropped: its upstream
// stream ends and its saved config is removed.
func (a *Agent) onKeyGone(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.relays[key]; r != nil {
		r.linger(a.cfg.RelayLinger)
	}
}

// dropIdle drops r if it is still the key's relay and still unused.
func (a *Agent) dropIdle(r *relay) {
	a.mu.Lock()
	if a.relays[r.key.Key] != r || !r.idle() {
		a.mu.Unlock()
		return
	}
	a.unlinkLocked(r)
	a.mu.Unlock()
	a.finishDrop(r, "no local proxy of this node.cluster for a while; stopped relaying it")
}

// unlinkLocked removes r from the relays (a.mu held); finishDrop then
// ends it.
func (a *Agent) unlinkLocked(r *relay) {
	delete(a.relays, r.key.Key)
	delete(a.pending, r.key.Key)
}

// finishDrop ends an unlinked relay: its upstream stream, what the local
// server serves of it and its saved config.
func (a *Agent) finishDrop(r *relay, msg string) {
	r.mu.Lock()
	r.dropped = true // a late update of its stream must not serve or save it again
	if r.lingering != nil {
		r.lingering.Stop()
	}
	r.mu.Unlock()
	if r.cancel != nil {
		r.cancel()
	}
	_, _ = a.server.SetRelay(r.key.Key, nil)
	if err := a.store.remove(r.key.Key); err != nil {
		a.log.Warn().Err(err).Str("node_cluster", r.key.NodeCluster).Msg("cannot remove the saved config of an unused node.cluster")
	}
	a.log.Info().Str("node_cluster", r.key.NodeCluster).Dur("linger", a.cfg.RelayLinger).Msg(msg)
}

// reserveAll serves every key again with the current local secrets.
func (a *Agent) reserveAll() {
	a.mu.Lock()
	relays := make([]*relay, 0, len(a.relays))
	for _, r := range a.relays {
		relays = append(relays, r)
	}
	a.mu.Unlock()
	for _, r := range relays {
		r.reserve()
	}
}

// restore serves a key saved in the data directory and starts relaying it.
func (a *Agent) restore(key string, anys []*anypb.Any) {
	k := serve.ParseRelayKey(key)
	r := newRelay(a, k)
	if err := r.restore(anys); err != nil {
		a.log.Warn().Err(err).Str("node_cluster", k.NodeCluster).Msg("cannot serve the saved config; waiting for the central bridge")
		return
	}
	a.mu.Lock()
	a.startLocked(r)
	r.linger(a.cfg.RelayLinger) // until a local proxy of it connects
	a.mu.Unlock()
}

// persist queues key's resources for the data directory. Writes are
// coalesced: a burst of updates writes each key once.
func (a *Agent) persist(key string, res *xds.Resources) {
	a.mu.Lock()
	a.pending[key] = res
	a.mu.Unlock()
	select {
	case a.saves <- struct{}{}:
	default:
	}
}

// saveEvery is the least time between two writes of the data directory.
// Each write of a key is a file written, synced and renamed; under
// back-to-back changes (a rolling deploy, a flapping check) that was
// most of an agent's CPU per change. The first change after a quiet
// spell is written at once; changes that follow within saveEvery are
// written together, the newest state, when it has passed. So the disk
// is at most saveEvery behind memory, and an agent stopped meanwhile
// writes what is pending before it exits.
const saveEvery = time.Second

func (a *Agent) saveLoop(ctx context.Context) {
	a.saveLoopEvery(ctx, saveEvery)
}

func (a *Agent) saveLoopEvery(ctx context.Context, every time.Duration) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			a.flush()
			return
		case <-a.saves:
		}
		if wait := every - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				a.flush()
				return
			case <-t.C:
			}
		}
		a.flush()
		last = time.Now()
	}
}

func (a *Agent) flush() {
	a.mu.Lock()
	pending := a.pending
	a.pending = map[string]*xds.Resources{}
	for key := range pending {
		if a.relays[key] == nil {
			delete(pending, key) // dropped meanwhile
		}
	}
	if a.encoded == nil {
		a.encoded = map[string]map[proto.Message]*anypb.Any{}
	}
	for key := range a.encoded {
		if a.relays[key] == nil {
			delete(a.encoded, key) // dropped: its saved config goes too
		}
	}
	a.mu.Unlock()
	for key, res := range pending {
		var anys []*anypb.Any
		last, now := a.encoded[key], map[proto.Message]*anypb.Any{}
		for _, list := range res.ByType() {
			for _, m := range list {
				enc := last[m]
				if enc == nil {
					enc = res.Encoded[m] // as it arrived from the central bridge
				}
				if enc == nil {
					var err error
					if enc, err = anypb.New(m); err != nil {
						continue
					}
				}
				now[m] = enc
				anys = append(anys, enc)
			}
		}
		a.encoded[key] = now
		if err := a.store.save(key, anys); err != nil {
			a.log.Error().Err(err).Str("data_dir", a.cfg.DataDir).Msg("cannot save the last good config; a restart during a central outage would not have it")
		}
	}
}

// keyStatus is one key on /readyz.
type keyStatus struct {
	NodeCluster string `json:"node_cluster"`
	Proxyless   bool   `json:"proxyless,omitempty"`
	Upstream    string `json:"upstream,omitempty"`
	// Serving is where the served config came from: "upstream" (this
	// run's stream), "disk" (the data directory, central unreachable
	// since start) or "" (nothing yet).
	Serving string `json:"serving"`
	// Error is why the last attempt to sync failed; SyncError is set
	// while streams reach a replica and still fail (the relay cannot
	// sync: not ready); Refused while the central bridge refuses the
	// group to this agent (its local proxies are refused with it).
	Error     string `json:"error,omitempty"`
	SyncError string `json:"sync_error,omitempty"`
	Refused   string `json:"refused,omitempty"`
}

func (a *Agent) keys() []keyStatus {
	a.mu.Lock()
	relays := make([]*relay, 0, len(a.relays))
	for _, r := range a.relays {
		relays = append(relays, r)
	}
	a.mu.Unlock()
	var out []keyStatus
	for _, r := range relays {
		out = append(out, r.status())
	}
	slices.SortFunc(out, func(x, y keyStatus) int {
		return cmp.Or(strings.Compare(x.NodeCluster, y.NodeCluster), cmp.Compare(boolInt(x.Proxyless), boolInt(y.Proxyless)))
	})
	return out
}

func (a *Agent) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	// Ready when every local node.cluster is served: relayed live, or from
	// the last good config while the central bridge is unreachable (said
	// so, per key). Not ready only for a key with nothing to serve.
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		code, status, keys, envoys := a.readyz()
		out := map[string]any{"status": status, "node_clusters": keys}
		if len(envoys) > 0 {
			out["envoys"] = envoys
		}
		writeJSON(w, code, out)
	})
	mux.HandleFunc("GET /v1/proxies", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, a.proxies()) })
	mux.Handle("GET /metrics", a.metricsHandler())
	return mux
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
