// Package serve is the bridge's xDS runtime: it serves translations (the
// xds package's Output) over ADS and the per-type SotW and delta services
// with its own stream servers (sotw.go, delta.go; go-control-plane's
// protocol rules and types), from its own per-resource cache (package
// cache, which also owns the codec the servers speak). It decides what
// each node.cluster key is served (server.go, roles.go, make-before-break
// steps in staging.go, relay.go; an older Envoy's rewritten copy, per
// version class, in compat.go), keeps the protocol state of every
// stream (tracker.go), bounds initial syncs (admission.go), authorizes
// nodes (authz.go), reloads its TLS files (tls.go), answers gRPC health
// (health.go) and exports metrics. Everything here is long-running and
// locked; what is served is decided in the pure xds package.
//
// Lock order: Server.mu, then the cache's lock, then a stream's outbox's
// (and the send pool's). The cache never calls back up into this package
// under its lock, except to queue an answer on a stream (package cache's
// doc).
package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/envoycompat"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	Logger zerolog.Logger
	// ShutdownGrace bounds how long Serve waits for streams to end after its
	// context is cancelled before it closes them.
	ShutdownGrace time.Duration
	// StaleAfter is how long a response may wait for its ACK before
	// Proxies reports the proxy STALE. Default 10s.
	StaleAfter time.Duration
	// Registerer receives the xDS metrics (consul_xds_bridge_*). nil means
	// a private registry, never the global default, so that several
	// Servers (tests) can coexist.
	Registerer prometheus.Registerer
	// TLS serves xDS over TLS when CertFile is set (mTLS with ClientCAFile).
	TLS TLSFiles
	// AuthorizeNodes refuses clients whose certificate does not name the
	// node they claim (see authorized); it needs TLS.ClientCAFile.
	AuthorizeNodes bool
	// MaxInitialSyncs bounds how many streams receive their initial state
	// at once (admission.go); 0 means no bound. The daemon passes the
	// setting (policy.DefaultMaxInitialSyncs unless configured).
	MaxInitialSyncs int
	// StepTimeout bounds how long each make-before-break step waits for
	// a node.cluster's proxies to acknowledge it (staging.go). Default 5s.
	StepTimeout time.Duration
	// FirstRequestTimeout closes streams that send no request for this
	// long after opening (firstrequest.go). Default 30s.
	FirstRequestTimeout time.Duration
	// Relay serves what SetRelay sets per key instead of translations
	// (relay.go); OnKey, if set, is told each key when its first stream
	// names its node, so the relay can start fetching it.
	Relay bool
	OnKey func(RelayKey)
	// OnKey and OnKeyGone are told keys without their Envoy version
	// class (RelayKey.Key, cache.BaseKey): one for all the classes of
	// a node.cluster, which the server rewrites itself.
	// OnKeyGone, if set, is told a key when its last stream has gone.
	OnKeyGone func(key string)
	// AllowNode, if set, is asked about every stream's node when it is
	// first known; an error refuses the stream with PermissionDenied.
	AllowNode func(*corev3.Node) error
	// Sidecars serves Connect sidecars by node id (sidecar.go): streams
	// are keyed once the first SetSidecars has come. Off, no stream pays
	// for the keying.
	Sidecars bool
	// StreamInterceptor, if set, runs innermost around every stream, so
	// it sees requests with their node keyed (sidecars); the agent vets
	// socket peers and the secrets they ask for with it. EndStream ends
	// a stream it holds from outside.
	StreamInterceptor grpc.StreamServerInterceptor
}

// Server serves the translation over ADS (and the per-type SotW and delta
// services) from its cache (package cache).
//
// What a proxy gets is keyed by the node.cluster it announces, not by
// proxy group: a key exists for every node.cluster seen, and each update
// re-resolves which group it belongs to. So a policy that adds a group or
// changes a glob pattern moves already-connected proxies at once, and the
// resources themselves are shared between keys, never copied.
type Server struct {
	cfg     ServerConfig
	log     zerolog.Logger
	cache   *cache.Cache // also the one record of every node.cluster key
	cb      *callbacks
	history *history
	tracker *tracker
	// senders sends updates' answers (sendpool.go); Serve stops it.
	senders *sendPool
	metrics *metrics
	health  *healthService
	// fans counts running fan-outs for the daemon's build gate (fanwait.go).
	fans  *openFanouts
	scope *scopeLog // scope.go
	// sidecars keys Connect sidecars by node id (sidecar.go).
	sidecars *sidecars
	// bases counts the keys of each node.cluster (one per Envoy version
	// class, compat.go), so OnKey and OnKeyGone are told once for all.
	bases baseKeys

	mu      sync.Mutex
	out     *xds.Output
	resolve func(nodeCluster string) string
	// lastGood holds each role's last resources that translated cleanly:
	// a group in Output.Failed is served these (with the current shared
	// clusters and endpoints), so its proxies keep their listeners while
	// endpoint health still flows.
	lastGood map[string]*xds.Resources
	// chains holds the latest set per role and type (setLocked): a new
	// translation's set is built against it, reusing the entries of
	// unchanged resources and recording what changed.
	chains map[string]*cache.Set
	// chainFrom is what each chain's latest set was built from: a chain
	// built from the same resources again keeps its set (setLocked).
	chainFrom map[string]chainSource
	// setBuilds counts the sets built and keysSet the keys whose sets
	// were computed (for tests: what an update cost).
	setBuilds, keysSet int
	// keyFrom is what each key's sets were last computed from (keptLocked):
	// an update leaves a key alone while those are the same resources.
	keyFrom map[string]keySource
	// keyChains collects the chains of the key whose sets are being
	// computed (setLocked), nil otherwise.
	keyChains *[]string
	// built memoises the current translation's sets per resource set, so
	// keys sharing resources share sets.
	built map[builtKey]map[string]*builtSet
	// compat keeps older Envoys' rewritten copies across translations
	// (envoycompat.Memo): an unchanged resource keeps its copy.
	compat envoycompat.Memo
	// downgraded is, per key of an older Envoy's class, what it is served
	// differently (compat.go); warned, the node ids logged about it.
	downgraded map[string][]string
	warned     map[string]bool
	// usedChains are the chains the current translation built; the others
	// (groups gone from the policy) are dropped after each Update.
	usedChains map[string]bool
	// staged holds the keys whose update is served in steps
	// (make-before-break, staging.go); stagedKeys is its size, read
	// without the lock.
	staged     map[string]*staging
	stagedKeys atomic.Int32
	// relay holds, in relay mode, what each key is served (relay.go).
	relay map[string]*xds.Resources
}

// NewServer returns a Server with an empty cache. Until the first
// Update, every request waits: no proxy is answered with nothing.
func NewServer(cfg ServerConfig) *Server {
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 5 * time.Second
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 10 * time.Second
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = defaultStepTimeout
	}
	if cfg.FirstRequestTimeout <= 0 {
		cfg.FirstRequestTimeout = defaultFirstRequestTimeout
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	log := cfg.Logger.With().Str("component", "xds").Logger()
	s := &Server{
		cfg:       cfg,
		log:       log,
		lastGood:  map[string]*xds.Resources{},
		chains:    map[string]*cache.Set{},
		chainFrom: map[string]chainSource{},
		staged:    map[string]*staging{},
	}
	s.tracker = newTracker()
	s.metrics = newMetrics(cfg.Registerer, log)
	s.fans = newOpenFanouts()
	s.cache = cache.New(cache.Config{Watched: s.watched, FanStarted: s.fans.started, Fanned: func(d time.Duration) {
		s.metrics.fanout.Observe(d.Seconds())
		s.fans.ended()
	}})
	s.scope = newScopeLog(cfg.Registerer, log)
	s.sidecars = newSidecars(log, cfg.Sidecars)
	s.sidecars.authorize = cfg.AuthorizeNodes
	s.cb = newCallbacks(log, s.tracker, s.metrics, s.sawNode, s.forgetKey, newAdmission(cfg.MaxInitialSyncs, s.metrics))
	s.history = newHistory()
	s.cb.history = s.history
	s.cb.answered = s.streamAnswered
	s.cb.allow = cfg.AllowNode
	s.cb.oldEnvoy = s.warnOldEnvoy
	s.health = newHealthService()
	s.senders = newSendPool(clockwork.NewRealClock(), s.metrics.sendsBlocked.Inc)
	return s
}

// healthServices are the names the gRPC health service answers for: the
// server as a whole and the ADS service. NOT_SERVING until the first
// snapshot is set, and again from the start of a graceful shutdown.
var healthServices = []string{"", discoveryv3.AggregatedDiscoveryService_ServiceDesc.ServiceName}

// Proxies returns the protocol status of every connected xDS stream,
// sorted by node id, then stream (/v1/proxies).
func (s *Server) Proxies() []ProxyStatus {
	ps := s.tracker.snapshot(time.Now(), s.cfg.StaleAfter)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range ps {
		p := &ps[i]
		p.Group = s.groupOfKeyLocked(p.key)
		if p.Group == "" && s.out != nil && !s.unmatchedServedLocked() {
			p.Status = StatusNoGroup
		}
		if err := s.groupErrorLocked(p.key); err != nil {
			p.GroupError = err.Error()
		}
		p.Sidecar = s.sidecars.status(p.NodeID, p.key)
		p.Downgraded = downgradedOf(p.EnvoyVersion, s.downgraded[p.key])
		sets := s.cache.Served(p.key)
		for _, ts := range p.Types {
			if set := sets[ts.TypeURL]; set != nil {
				ts.VersionCurrent = set.Version()
			}
		}
	}
	return ps
}

// ProxyCount is len(Proxies()) without building every stream's status
// under the server's locks: the console's activity sampler asks every 2 s,
// and Proxies costs O(streams) allocations and holds the tracker's and
// the server's locks meanwhile (132 ms of CPU a second at 20,000 idle
// streams, bench/README.md).
func (s *Server) ProxyCount() int { return s.tracker.count() }

// StreamCounts returns how many xDS streams are open, and how many have
// opened since the server began (the idle collector's sign of a storm).
func (s *Server) StreamCounts() (open int, opened uint64) { return s.tracker.streamCounts() }

// proxylessGroup is what /v1/proxies and config dumps show as the group
// of a proxyless gRPC client.
const proxylessGroup = "(proxyless gRPC)"

// groupOfKeyLocked is the group shown for a snapshot key.
func (s *Server) groupOfKeyLocked(key string) string {
	if s.out == nil || s.resolve == nil {
		if _, proxyless := cache.ParseKey(key); proxyless {
			return proxylessGroup
		}
		return ""
	}
	switch role, _, _ := s.roleLocked(key); role {
	case "proxyless":
		return proxylessGroup
	case "none":
		return ""
	default:
		return strings.TrimPrefix(role, "group/")
	}
}

// groupErrorLocked is why a key's group failed its last translation, nil
// if it did not.
func (s *Server) groupErrorLocked(key string) error {
	if s.out == nil || s.resolve == nil {
		return nil
	}
	switch role, _, _ := s.roleLocked(key); role {
	case "proxyless":
		return s.out.ProxylessFailed
	case "none":
		return nil
	default:
		return s.out.Failed[strings.TrimPrefix(role, "group/")]
	}
}

// groupResourcesLocked is the group part a key is served from (its last
// good one if the group failed), nil for none.
func (s *Server) groupResourcesLocked(key string) *xds.Resources {
	if s.out == nil || s.resolve == nil {
		return nil
	}
	role, group, _ := s.roleLocked(key)
	if role == "none" {
		return nil
	}
	return group
}

// writeBufferSize is the per-connection write batch (see Serve).
const writeBufferSize = 8 << 10

// TransportOptions are the gRPC server's connection and stream settings,
// without the codec, credentials or interceptors. The load harness's
// floor server (bench/floor.go) takes the same, so what it measures of a
// bare gRPC server is what the bridge's transport holds.
func TransportOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		// Envoy multiplexes all its xDS streams over one connection; a
		// bound keeps one misbehaving client from opening unbounded streams.
		grpc.MaxConcurrentStreams(1000),
		// A connection that never completes its HTTP/2 (or TLS) handshake
		// is dropped after this; gRPC's default of 120s would also hold up
		// shutdown that long.
		grpc.ConnectionTimeout(5 * time.Second),
		// Requests are small (names and nonces); 4 MiB is gRPC's default
		// made explicit. Responses may be large (all clusters), so sends
		// may be up to 64 MiB, which Envoy's own default accepts.
		grpc.MaxRecvMsgSize(4 << 20),
		// Each connection's writer takes a buffer of this size from a pool
		// when it has frames to send and, if they are fewer than ~1 KiB,
		// yields once to batch more before flushing. A health flip fans
		// out to every proxy at once, so every connection holds a buffer
		// through that yield: with gRPC's 32 KiB, 5,000 proxies held
		// ~150 MiB just for ~750-byte responses (issue 16's peak RSS).
		// Larger writes only flush more often.
		grpc.WriteBufferSize(writeBufferSize),
		// Fixed receive windows turn off gRPC's BDP estimation, which
		// pings a connection whenever data arrives: here every ACK, so
		// each push cost the proxy's connection a ping and its ack on top
		// of the response (two more syscalls each way). Requests are
		// small; 1 MiB lets even an edge proxy's subscription through in
		// one window.
		grpc.InitialWindowSize(1 << 20),
		grpc.InitialConnWindowSize(1 << 20),
		grpc.MaxSendMsgSize(64 << 20),
		// Dead peers are found within ~40s; clients may ping every 15s.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
	}
}

// Serve serves xDS on lis until ctx ends, then stops gracefully within the
// configured grace period.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	opts := append(TransportOptions(),
		// Responses that many streams share are encoded once (package cache's codec.go).
		grpc.ForceServerCodecV2(cache.NewCodec()))
	var tlsCfg *tls.Config
	if s.cfg.TLS.CertFile != "" {
		r, err := newCertReloader(s.cfg.TLS, s.log)
		if err != nil {
			return err
		}
		// portMux does the handshake (gRPC and REST share the port).
		tlsCfg = r.TLSConfig()
		opts = append(opts, grpc.Creds(handshakenCreds{}))
	}
	interceptors := []grpc.StreamServerInterceptor{cache.NodeMemoInterceptor, firstRequestInterceptor(s.cfg.FirstRequestTimeout, s.metrics.idleClosed.Inc)}
	if s.cfg.AuthorizeNodes {
		if s.cfg.TLS.ClientCAFile == "" {
			return errors.New("xds: authorize_nodes needs TLS with client_ca_file")
		}
		interceptors = append(interceptors, authzInterceptor(s.log, s.authorizeNode))
	}
	// Inside authorization, which judges the node.cluster the proxy
	// announced; sidecars are re-keyed after it (sidecar.go).
	if s.cfg.Sidecars {
		interceptors = append(interceptors, s.sidecars.interceptor())
	}
	if s.cfg.StreamInterceptor != nil {
		interceptors = append(interceptors, s.cfg.StreamInterceptor)
	}
	opts = append(opts, grpc.ChainStreamInterceptor(interceptors...))
	g := grpc.NewServer(opts...)
	defer s.senders.stop()
	srv := newXDSServer(ctx, s.cache, s.cb, s.senders)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, srv)
	clusterservice.RegisterClusterDiscoveryServiceServer(g, srv)
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, srv)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, srv)
	routeservice.RegisterRouteDiscoveryServiceServer(g, srv)
	secretservice.RegisterSecretDiscoveryServiceServer(g, srv)
	healthpb.RegisterHealthServer(g, s.health)

	mux := newPortMux(lis, tlsCfg, s.log)
	rest := s.restServer()
	errc := make(chan error, 2)
	// The port's own failure is the one to report: it is sent before
	// the port closes, after which gRPC's Serve only sees its listener
	// closed.
	go func() {
		if err := mux.run(); !errors.Is(err, net.ErrClosed) {
			errc <- fmt.Errorf("accepting on %s: %w", lis.Addr(), err)
		}
		mux.Close()
	}()
	go func() { errc <- g.Serve(mux.grpc) }()
	go func() { _ = rest.Serve(mux.http) }()
	defer rest.Close()
	defer mux.Close()
	s.log.Info().Str("addr", lis.Addr().String()).Msg("serving xDS (gRPC and REST)")
	select {
	case err := <-errc:
		// The port is gone: the connections it had end too, rather than
		// serving on after Serve has returned.
		g.Stop()
		return fmt.Errorf("xds server: %w", err)
	case <-ctx.Done():
	}
	// Stop accepting at once; open streams drain below.
	mux.Close()
	// Health checkers see NOT_SERVING for the whole drain, and Updates
	// from now on do not flip it back.
	s.health.shutdown()
	defer s.unstageAll()
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.ShutdownGrace):
		s.log.Warn().Dur("grace", s.cfg.ShutdownGrace).Msg("streams still open after grace period; closing them")
		go g.Stop()
		// Stop waits for connection handlers; do not let one stuck in a
		// handshake keep the process alive past the bound.
		select {
		case <-done:
		case <-time.After(s.cfg.ShutdownGrace):
			s.log.Warn().Msg("connections still closing; exiting anyway")
		}
	}
	return nil
}

// Update installs a new translation. resolve maps a node.cluster to its
// proxy group in out.Groups ("" or an unknown name: shared resources only).
// A group in out.Failed keeps the listeners, routes and secrets it last
// had; everything else updates. Versions are hashes of content, so an
// unchanged resource or type is not resent and a restarted bridge serves
// the versions its proxies already hold. It returns the type URLs that
// changed for any key.
func (s *Server) Update(ctx context.Context, out *xds.Output, resolve func(nodeCluster string) string) ([]string, error) {
	start := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.metrics.updateSeconds.Observe(time.Since(start).Seconds()) }()
	s.metrics.setResources(out)
	s.out, s.resolve = out, resolve
	s.keepLastGoodLocked()
	s.setScopeViewLocked()
	s.built = map[builtKey]map[string]*builtSet{}
	s.compat.Next()
	s.usedChains = map[string]bool{}
	changed := map[string]bool{}
	var errs []error
	for _, key := range s.cache.Keys() {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		if s.keptLocked(key) {
			continue
		}
		types, err := s.setKeyLocked(key)
		if err != nil {
			errs = append(errs, err)
		}
		for _, t := range types {
			changed[t] = true
		}
	}
	for chain := range s.chains {
		if !s.usedChains[chain] {
			delete(s.chains, chain)
			delete(s.chainFrom, chain)
		}
	}
	if s.cache.Served("") != nil {
		s.health.setServing()
	}
	return slices.Sorted(maps.Keys(changed)), errors.Join(errs...)
}

// keepLastGoodLocked records the resources of every role that translated
// cleanly and forgets groups gone from the policy.
func (s *Server) keepLastGoodLocked() {
	next := map[string]*xds.Resources{}
	for g, r := range s.out.Groups {
		next["group/"+g] = r
	}
	for g := range s.out.Failed {
		if r := s.lastGood["group/"+g]; r != nil {
			next["group/"+g] = r
		}
	}
	switch {
	case s.out.Proxyless != nil:
		next["proxyless"] = s.out.Proxyless
	case s.out.ProxylessFailed == nil:
		next["proxyless"] = noResources // an Output made without any
	case s.lastGood["proxyless"] != nil:
		next["proxyless"] = s.lastGood["proxyless"]
	}
	s.lastGood = next
}

// sawNode makes sure a proxy's node.cluster is served as soon as it asks,
// so its first request is answered from the current state.
func (s *Server) sawNode(key string) {
	if !s.cache.Join(key) {
		return
	}
	if s.cfg.OnKey != nil {
		s.bases.join(key, func() { s.cfg.OnKey(ParseRelayKey(key)) })
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil && !s.cfg.Relay {
		return // not synced yet: the request waits
	}
	if _, err := s.setKeyLocked(key); err != nil {
		s.log.Error().Err(err).Str("node_cluster", key).Msg("cannot serve new node cluster")
	}
}

// forgetKey is told when a stream of key has gone; the cache drops the key
// with its last stream, so keys do not pile up with every node.cluster
// ever announced (clients choose it) and updates stop building for them.
func (s *Server) forgetKey(key string) {
	if s.cache.Leave(key) {
		s.mu.Lock()
		s.unstageLocked(key) // nobody left to wait for
		delete(s.downgraded, key)
		delete(s.keyFrom, key)
		s.mu.Unlock()
		if s.cfg.OnKeyGone != nil {
			s.bases.leave(key, func() { s.cfg.OnKeyGone(cache.BaseKey(key)) })
		}
	}
}

func (s *Server) setKeyLocked(key string) ([]string, error) {
	s.keysSet++
	delete(s.keyFrom, key)
	var chains []string
	s.keyChains = &chains
	sets, err := s.setsLocked(key)
	s.keyChains = nil
	if errors.Is(err, ErrNoGoodState) {
		return nil, nil // keeps what it has, or waits
	}
	if err != nil {
		return nil, fmt.Errorf("node cluster %q: %w", key, err)
	}
	if !s.cfg.Relay {
		if s.keyFrom == nil {
			s.keyFrom = map[string]keySource{}
		}
		src := keySource{chains: chains}
		src.role, src.group, src.reach = s.roleLocked(key)
		s.keyFrom[key] = src
	}
	return s.stageLocked(key, sets), nil
}

// keySource is what a key's sets were computed from: its role's
// resources and the chains that hold its sets.
type keySource struct {
	role         string
	group, reach *xds.Resources
	chains       []string
}

// keptLocked reports whether key's sets need no computing in this update:
// they were computed from the very resources its role has now (resources
// are never modified once in an Output), and no make-before-break step is
// under way for it. Its chains stay in use. An endpoint flip then costs
// the keys whose reach it patched, not every key (issue 40).
func (s *Server) keptLocked(key string) bool {
	src, ok := s.keyFrom[key]
	if !ok || s.cfg.Relay || s.staged[key] != nil || s.cache.Served(key) == nil {
		return false
	}
	if role, group, reach := s.roleLocked(key); role != src.role || group != src.group || reach != src.reach {
		return false
	}
	for _, c := range src.chains {
		s.usedChains[c] = true
	}
	return true
}
