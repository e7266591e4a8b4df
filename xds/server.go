package xds

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	sotwv3 "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
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

	// marshalPerStream serves SotW responses as go-control-plane builds
	// them, every resource marshalled again for every stream, instead of
	// shared (see marshal.go). For benchmarks and tests only.
	marshalPerStream bool
}

// Server serves snapshots over ADS (and the per-type SotW and delta
// services) from a go-control-plane snapshot cache.
//
// Snapshots are keyed by the node.cluster a proxy announces, not by proxy
// group: a key exists for every node.cluster seen, and each update
// re-resolves which group it belongs to. So a policy that adds a group or
// changes a glob pattern moves already-connected proxies at once, and the
// resources themselves are shared between keys, never copied.
type Server struct {
	cfg     ServerConfig
	log     zerolog.Logger
	cache   cachev3.SnapshotCache
	share   *shareCache // cache, with SotW responses marshalled once (marshal.go)
	marshal marshalCache
	cb      *callbacks
	tracker *tracker
	metrics *metrics
	health  *healthService

	mu       sync.Mutex
	out      *Output
	resolve  func(nodeCluster string) string
	keys     map[string]bool              // every node.cluster seen
	versions map[string]map[string]string // key -> type URL -> version set
	typeVers map[*Resources]map[string]string
	// secretVers is the SDS version per group (shared secrets included).
	secretVers map[*Resources]string
	// gen holds the marshalled resources of out (see marshal.go).
	gen *marshalGen
	// verMaps are the delta version maps (resource name -> hash) per
	// resource set and type URL, shared by all snapshots of an Update;
	// secretMaps the SDS one per group (shared secrets included).
	verMaps    map[*Resources]map[string]*lazyVersionMap
	secretMaps map[*Resources]*lazyVersionMap
	// built holds the resource sets each key's cached snapshot was built
	// from: a key whose versions did not change keeps an older snapshot,
	// whose resources the marshal cache must keep too.
	built map[string][]*Resources
}

// NewServer returns a Server with an empty cache. Until the first
// SetResources, every request waits: no proxy is answered with nothing.
func NewServer(cfg ServerConfig) *Server {
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 5 * time.Second
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 10 * time.Second
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	log := cfg.Logger.With().Str("component", "xds").Logger()
	s := &Server{
		cfg:      cfg,
		log:      log,
		keys:     map[string]bool{},
		versions: map[string]map[string]string{},
	}
	// ads=false: go-control-plane's ADS mode answers a SotW request only if
	// it names every resource of the type in the snapshot. Envoy names all
	// its clusters, but proxyless gRPC clients ask for the few they use and
	// would never be answered. Response order over ADS is kept by the
	// server's ordered-ADS mode instead (see Serve).
	s.cache = cachev3.NewSnapshotCache(false, nodeClusterHash{}, Logger(log.With().Str("component", "xds-cache").Logger()))
	s.share = newShareCache(s.cache, &s.marshal)
	s.tracker = newTracker()
	s.metrics = newMetrics(cfg.Registerer, log)
	s.cb = newCallbacks(log, s.tracker, s.metrics, s.sawNode)
	s.health = newHealthService()
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
		vers := s.versions[p.key]
		for _, ts := range p.Types {
			ts.VersionCurrent = vers[ts.TypeURL]
		}
	}
	return ps
}

// proxylessGroup is what /v1/proxies and config dumps show as the group
// of a proxyless gRPC client.
const proxylessGroup = "(proxyless gRPC)"

// groupOfKeyLocked is the group shown for a snapshot key.
func (s *Server) groupOfKeyLocked(key string) string {
	if nodeCluster, proxyless := parseKey(key); !proxyless {
		return s.groupLocked(nodeCluster)
	}
	return proxylessGroup
}

// groupLocked is the proxy group whose listeners a node.cluster gets, ""
// if none.
func (s *Server) groupLocked(nodeCluster string) string {
	if s.out == nil || s.resolve == nil {
		return ""
	}
	g := s.resolve(nodeCluster)
	if _, ok := s.out.Groups[g]; !ok {
		return ""
	}
	return g
}

// Cache exposes the snapshot cache, for inspection (config dumps, tests).
func (s *Server) Cache() cachev3.SnapshotCache { return s.share }

// watchCache is the cache the xDS server watches: the shared-marshalling
// one unless the config asks for go-control-plane's own responses.
func (s *Server) watchCache() cachev3.SnapshotCache {
	if s.cfg.marshalPerStream {
		return s.cache
	}
	return s.share
}

// Serve serves xDS on lis until ctx ends, then stops gracefully within the
// configured grace period.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	opts := []grpc.ServerOption{
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
		grpc.MaxSendMsgSize(64 << 20),
		// Dead peers are found within ~40s; clients may ping every 15s.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
	}
	if s.cfg.TLS.CertFile != "" {
		r, err := newCertReloader(s.cfg.TLS, s.log)
		if err != nil {
			return err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(r.TLSConfig())))
	}
	if s.cfg.AuthorizeNodes {
		if s.cfg.TLS.ClientCAFile == "" {
			return errors.New("xds: authorize_nodes needs TLS with client_ca_file")
		}
		opts = append(opts, grpc.StreamInterceptor(authzInterceptor(s.log)))
	}
	g := grpc.NewServer(opts...)
	srv := serverv3.NewServer(ctx, nackGuard{SnapshotCache: s.watchCache(), tracker: s.tracker}, s.cb, sotwv3.WithOrderedADS())
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, srv)
	clusterservice.RegisterClusterDiscoveryServiceServer(g, srv)
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, srv)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, srv)
	routeservice.RegisterRouteDiscoveryServiceServer(g, srv)
	secretservice.RegisterSecretDiscoveryServiceServer(g, srv)
	healthpb.RegisterHealthServer(g, s.health)

	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	s.log.Info().Str("addr", lis.Addr().String()).Msg("serving xDS")
	select {
	case err := <-errc:
		return fmt.Errorf("xds server: %w", err)
	case <-ctx.Done():
	}
	// Health checkers see NOT_SERVING for the whole drain, and Updates
	// from now on do not flip it back.
	s.health.shutdown()
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
// Each type's version is a hash of its content, so an unchanged type is
// not resent and a restarted bridge serves the versions its proxies
// already hold. It returns the type URLs that changed for any key.
func (s *Server) Update(ctx context.Context, out *Output, resolve func(nodeCluster string) string) ([]string, error) {
	start := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.metrics.updateSeconds.Observe(time.Since(start).Seconds()) }()
	s.metrics.setResources(out)
	s.out, s.resolve = out, resolve
	s.typeVers = map[*Resources]map[string]string{}
	s.secretVers = map[*Resources]string{}
	s.verMaps = map[*Resources]map[string]*lazyVersionMap{}
	s.secretMaps = map[*Resources]*lazyVersionMap{}
	s.gen = s.marshal.next(s.liveSetsLocked())
	s.keys[""] = true
	changed := map[string]bool{}
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(s.keys)) {
		types, err := s.setKeyLocked(ctx, key)
		if err != nil {
			errs = append(errs, err)
		}
		for _, t := range types {
			changed[t] = true
		}
	}
	// Drop what no snapshot serves any more.
	s.gen = s.marshal.next(s.liveSetsLocked())
	if len(s.versions) > 0 {
		s.health.setServing()
	}
	return slices.Sorted(maps.Keys(changed)), errors.Join(errs...)
}

// liveSetsLocked are the resource sets served: the current translation's
// and those of the snapshots in the cache.
func (s *Server) liveSetsLocked() []*Resources {
	var sets []*Resources
	if s.out != nil {
		sets = append(sets, s.out.Shared, s.out.Proxyless)
		for _, g := range s.out.Groups {
			sets = append(sets, g)
		}
	}
	for _, b := range s.built {
		sets = append(sets, b...)
	}
	return sets
}

// sawNode makes sure a proxy's node.cluster has a snapshot as soon as it
// asks, so its first request is answered from the current state.
func (s *Server) sawNode(nodeCluster string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys[nodeCluster] {
		return
	}
	s.keys[nodeCluster] = true
	if s.out == nil {
		return // not synced yet: the request waits
	}
	if _, err := s.setKeyLocked(context.Background(), nodeCluster); err != nil {
		s.log.Error().Err(err).Str("node_cluster", nodeCluster).Msg("cannot set snapshot for new node cluster")
	}
}

func (s *Server) setKeyLocked(ctx context.Context, key string) ([]string, error) {
	snap, versions, err := s.buildLocked(key)
	if err != nil {
		return nil, err
	}
	prev := s.versions[key]
	if maps.Equal(versions, prev) {
		return nil, nil
	}
	if err := Consistent(snap.Snapshot); err != nil {
		return nil, fmt.Errorf("node cluster %q: inconsistent snapshot: %w", key, err)
	}
	if err := s.share.SetSnapshot(ctx, key, snap); err != nil {
		return nil, fmt.Errorf("node cluster %q: %w", key, err)
	}
	s.versions[key] = versions
	if s.built == nil {
		s.built = map[string][]*Resources{}
	}
	s.built[key] = snap.sets
	var changed []string
	for typ, v := range versions {
		if prev[typ] != v {
			changed = append(changed, typ)
		}
	}
	return changed, nil
}

// buildLocked builds the snapshot of a node.cluster from the current
// translation, and its version per type URL.
func (s *Server) buildLocked(key string) (*servedSnapshot, map[string]string, error) {
	shared := s.out.Shared
	var group *Resources
	if nodeCluster, proxyless := parseKey(key); proxyless {
		group = s.out.Proxyless
	} else {
		group = s.out.Groups[s.resolve(nodeCluster)]
	}
	if group == nil {
		group = &Resources{}
	}
	snap := &servedSnapshot{Snapshot: &cachev3.Snapshot{}, maps: map[string]*lazyVersionMap{}, sets: []*Resources{shared, group}}
	versions := map[string]string{}
	for _, part := range []struct {
		res   *Resources
		types []string
	}{
		{shared, []string{resourcev3.ClusterType, resourcev3.EndpointType}},
		{group, []string{resourcev3.ListenerType, resourcev3.RouteType}},
	} {
		vers, err := s.versionsLocked(part.res)
		if err != nil {
			return nil, nil, fmt.Errorf("node cluster %q: %w", key, err)
		}
		byType := part.res.ByType()
		for _, typ := range part.types {
			versions[typ] = vers[typ]
			snap.Resources[cachev3.GetResponseType(typ)] = cachev3.NewResources(vers[typ], byType[typ])
			snap.maps[typ] = s.versionMapLocked(part.res, typ, byType[typ])
		}
	}
	// SDS: the shared secrets (upstream TLS) and the group's (listener
	// TLS) in one type. Its version moves when a certificate does, and
	// nothing else does: listeners and clusters name secrets, they do not
	// hold them.
	secrets := append(shared.ByType()[resourcev3.SecretType], group.ByType()[resourcev3.SecretType]...)
	slices.SortFunc(secrets, func(a, b types.Resource) int {
		return strings.Compare(cachev3.GetResourceName(a), cachev3.GetResourceName(b))
	})
	sv, ok := s.secretVers[group]
	if !ok {
		var err error
		if sv, err = contentVersionWith(s.gen, resourcev3.SecretType, secrets); err != nil {
			return nil, nil, fmt.Errorf("node cluster %q: %s: %w", key, resourcev3.SecretType, err)
		}
		if s.secretVers == nil {
			s.secretVers = map[*Resources]string{}
		}
		s.secretVers[group] = sv
	}
	versions[resourcev3.SecretType] = sv
	snap.Resources[cachev3.GetResponseType(resourcev3.SecretType)] = cachev3.NewResources(sv, secrets)
	svm, ok := s.secretMaps[group]
	if !ok {
		svm = &lazyVersionMap{mc: &s.marshal, typeURL: resourcev3.SecretType, items: secrets}
		if s.secretMaps == nil {
			s.secretMaps = map[*Resources]*lazyVersionMap{}
		}
		s.secretMaps[group] = svm
	}
	snap.maps[resourcev3.SecretType] = svm
	return snap, versions, nil
}

// versionMapLocked is the delta version map of one type of r, shared by
// every key of an Update and hashed at most once (see servedSnapshot).
func (s *Server) versionMapLocked(r *Resources, typ string, items []types.Resource) *lazyVersionMap {
	if m, ok := s.verMaps[r][typ]; ok {
		return m
	}
	m := &lazyVersionMap{mc: &s.marshal, typeURL: typ, items: items}
	if s.verMaps == nil {
		s.verMaps = map[*Resources]map[string]*lazyVersionMap{}
	}
	if s.verMaps[r] == nil {
		s.verMaps[r] = map[string]*lazyVersionMap{}
	}
	s.verMaps[r][typ] = m
	return m
}

// versionsLocked hashes each type of r once per Update, however many keys
// share it.
func (s *Server) versionsLocked(r *Resources) (map[string]string, error) {
	if v, ok := s.typeVers[r]; ok {
		return v, nil
	}
	v := map[string]string{}
	for typ, items := range r.ByType() {
		h, err := contentVersionWith(s.gen, typ, items)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", typ, err)
		}
		v[typ] = h
	}
	if s.typeVers == nil {
		s.typeVers = map[*Resources]map[string]string{}
	}
	s.typeVers[r] = v
	return v, nil
}

// contentVersion hashes resources (already sorted by name) so that equal
// content always yields the same version, on every replica and restart.
func contentVersion(items []types.Resource) (string, error) {
	return contentVersionWith(nil, "", items)
}

// contentVersionWith is contentVersion with the deterministic encodings
// taken from gen where it holds them (typeURL is the items' type); the
// result is the same.
func contentVersionWith(gen *marshalGen, typeURL string, items []types.Resource) (string, error) {
	h := sha256.New()
	var scratch []byte
	for _, r := range items {
		buf, cached, err := gen.marshalAppend(scratch, typeURL, r)
		if err != nil {
			return "", err
		}
		if !cached {
			scratch = buf
		}
		name := cachev3.GetResourceName(r)
		h.Write(binary.AppendUvarint(nil, uint64(len(name))))
		h.Write([]byte(name))
		h.Write(binary.AppendUvarint(nil, uint64(len(buf))))
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
}

// nodeClusterHash keys the cache by node.cluster (see Server).
type nodeClusterHash struct{}

var _ cachev3.NodeHash = nodeClusterHash{}

func (nodeClusterHash) ID(node *corev3.Node) string { return snapshotKey(node) }

// proxylessKey prefixes the snapshot key of proxyless gRPC clients, so a
// gRPC client and an Envoy announcing the same node.cluster get different
// listeners (API listeners vs. real ones). The separator cannot appear in
// a sensible node.cluster.
const proxylessKey = "grpc\x1f"

// snapshotKey is the cache key of a node: its node.cluster, marked for
// proxyless gRPC clients (user agent "gRPC ..." / "grpc-go").
func snapshotKey(node *corev3.Node) string {
	if isProxyless(node) {
		return proxylessKey + node.GetCluster()
	}
	return node.GetCluster()
}

func isProxyless(node *corev3.Node) bool {
	return strings.HasPrefix(strings.ToLower(node.GetUserAgentName()), "grpc")
}

func parseKey(key string) (nodeCluster string, proxyless bool) {
	return strings.CutPrefix(key, proxylessKey)
}
