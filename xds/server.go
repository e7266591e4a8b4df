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
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"
)

// DefaultGroup is the snapshot key of proxies whose node.cluster names no
// proxy group in policy: they get the shared clusters and endpoints only.
const DefaultGroup = ""

// ServerConfig configures a Server.
type ServerConfig struct {
	Logger zerolog.Logger
	// ShutdownGrace bounds how long Serve waits for streams to end after its
	// context is cancelled before it closes them.
	ShutdownGrace time.Duration
}

// Server serves snapshots over ADS (and the per-type SotW and delta
// services) from a go-control-plane snapshot cache.
type Server struct {
	cfg    ServerConfig
	log    zerolog.Logger
	cache  cachev3.SnapshotCache
	groups *groupHash
	xds    serverv3.Server
	cb     *callbacks

	mu       sync.Mutex
	versions map[string]map[string]string // snapshot key -> type URL -> version
}

// NewServer returns a Server with an empty cache. Until the first
// SetResources, every request waits: no proxy is answered with nothing.
func NewServer(cfg ServerConfig) *Server {
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 5 * time.Second
	}
	log := cfg.Logger.With().Str("component", "xds").Logger()
	s := &Server{
		cfg:      cfg,
		log:      log,
		groups:   &groupHash{},
		versions: map[string]map[string]string{},
	}
	s.cache = cachev3.NewSnapshotCache(true, s.groups, Logger(log.With().Str("component", "xds-cache").Logger()))
	s.cb = newCallbacks(log)
	return s
}

// Cache exposes the snapshot cache, for inspection (config dumps, tests).
func (s *Server) Cache() cachev3.SnapshotCache { return s.cache }

// Serve serves xDS on lis until ctx ends, then stops gracefully within the
// configured grace period.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	g := grpc.NewServer(
		// Envoy multiplexes all its xDS streams over one connection; a
		// bound keeps one misbehaving client from opening unbounded streams.
		grpc.MaxConcurrentStreams(1000),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
	)
	srv := serverv3.NewServer(ctx, s.cache, s.cb)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, srv)
	clusterservice.RegisterClusterDiscoveryServiceServer(g, srv)
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, srv)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, srv)
	routeservice.RegisterRouteDiscoveryServiceServer(g, srv)

	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	s.log.Info().Str("addr", lis.Addr().String()).Msg("serving xDS")
	select {
	case err := <-errc:
		return fmt.Errorf("xds server: %w", err)
	case <-ctx.Done():
	}
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.ShutdownGrace):
		s.log.Warn().Dur("grace", s.cfg.ShutdownGrace).Msg("streams still open after grace period; closing them")
		g.Stop()
	}
	return nil
}

// SetResources installs new resources: the shared clusters and endpoints
// for every proxy, plus per-group listeners and routes. Each type's version
// is a hash of its content, so an unchanged type is not resent and a
// restarted bridge serves the versions its proxies already hold. It returns
// the type URLs that changed for any group.
func (s *Server) SetResources(ctx context.Context, shared *Resources, groups map[string]*Resources) ([]string, error) {
	sharedByType := shared.ByType()
	keys := []string{DefaultGroup}
	for g := range groups {
		if g != DefaultGroup {
			keys = append(keys, g)
		}
	}
	slices.Sort(keys)

	s.mu.Lock()
	defer s.mu.Unlock()
	changed := map[string]bool{}
	var errs []error
	for _, key := range keys {
		byType := map[string][]types.Resource{
			resourcev3.ClusterType:  sharedByType[resourcev3.ClusterType],
			resourcev3.EndpointType: sharedByType[resourcev3.EndpointType],
		}
		if g := groups[key]; g != nil {
			gb := g.ByType()
			byType[resourcev3.ListenerType] = gb[resourcev3.ListenerType]
			byType[resourcev3.RouteType] = gb[resourcev3.RouteType]
		}
		versions := map[string]string{}
		snap := &cachev3.Snapshot{}
		for typ, items := range byType {
			v, err := contentVersion(items)
			if err != nil {
				return nil, fmt.Errorf("group %q %s: %w", key, typ, err)
			}
			versions[typ] = v
			snap.Resources[cachev3.GetResponseType(typ)] = cachev3.NewResources(v, items)
		}
		if maps.Equal(versions, s.versions[key]) {
			continue
		}
		if err := snap.Consistent(); err != nil {
			errs = append(errs, fmt.Errorf("group %q: inconsistent snapshot: %w", key, err))
			continue
		}
		if err := s.cache.SetSnapshot(ctx, key, snap); err != nil {
			errs = append(errs, fmt.Errorf("group %q: %w", key, err))
			continue
		}
		for typ, v := range versions {
			if s.versions[key][typ] != v {
				changed[typ] = true
			}
		}
		s.versions[key] = versions
	}
	s.groups.set(keys)
	return slices.Sorted(maps.Keys(changed)), errors.Join(errs...)
}

// contentVersion hashes resources (already sorted by name) so that equal
// content always yields the same version, on every replica and restart.
func contentVersion(items []types.Resource) (string, error) {
	h := sha256.New()
	opts := proto.MarshalOptions{Deterministic: true}
	var buf []byte
	for _, r := range items {
		var err error
		buf, err = opts.MarshalAppend(buf[:0], r)
		if err != nil {
			return "", err
		}
		name := cachev3.GetResourceName(r)
		h.Write(binary.AppendUvarint(nil, uint64(len(name))))
		h.Write([]byte(name))
		h.Write(binary.AppendUvarint(nil, uint64(len(buf))))
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
}

// groupHash keys the cache by proxy group: a node whose node.cluster names a
// group with its own snapshot gets that one, any other the default.
type groupHash struct {
	known atomic.Pointer[map[string]bool]
}

var _ cachev3.NodeHash = (*groupHash)(nil)

func (h *groupHash) ID(node *corev3.Node) string {
	if node == nil {
		return DefaultGroup
	}
	if m := h.known.Load(); m != nil && (*m)[node.GetCluster()] {
		return node.GetCluster()
	}
	return DefaultGroup
}

func (h *groupHash) set(keys []string) {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	h.known.Store(&m)
}
