package serve

import (
	"fmt"
	"maps"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
)

// Relay mode serves what another control plane sent rather than a
// translation: the local agent (package agent) holds, per snapshot key,
// the resources the central bridge serves that key, and sets them here
// with SetRelay. Everything else is the same server: per-resource content
// versions (so a proxy sees the central bridge's versions, byte for
// byte), make-before-break steps, bounds, admission and /v1/proxies.

// RelayKey names a proxy kind to a relay: the snapshot key a local
// proxy's node maps to, its node.cluster, and whether it is a proxyless
// gRPC client (which the central bridge serves API listeners).
type RelayKey struct {
	Key         string
	NodeCluster string
	Proxyless   bool
}

// KeyOf returns the relay key of a node.
func KeyOf(node *corev3.Node) RelayKey {
	return ParseRelayKey(cache.Key(node))
}

// ParseRelayKey is the RelayKey of a snapshot key (as RelayKey.Key).
func ParseRelayKey(key string) RelayKey {
	nc, proxyless := cache.ParseKey(key)
	return RelayKey{Key: key, NodeCluster: nc, Proxyless: proxyless}
}

// SetRelay makes key serve exactly r from now on (nil: stop serving it;
// its streams keep what they hold). The server must have been created
// with ServerConfig.Relay.
func (s *Server) SetRelay(key string, r *xds.Resources) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.relay == nil {
		s.relay = map[string]*xds.Resources{}
	}
	if r == nil {
		delete(s.relay, key)
		return nil, nil
	}
	s.relay[key] = r
	s.built = map[*xds.Resources]map[string]*cache.Set{}
	s.health.setServing()
	if !slices.Contains(s.cache.Keys(), key) {
		return nil, nil // served when a stream of it arrives (sawNode)
	}
	return s.setKeyLocked(key)
}

// RelayKeys lists the keys set with SetRelay.
func (s *Server) RelayKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.relay))
}

// relaySetsLocked is setsLocked in relay mode: every type from the key's
// relayed resources.
func (s *Server) relaySetsLocked(key string) (map[string]*cache.Set, error) {
	r := s.relay[key]
	if r == nil {
		return nil, errNoGoodState // waits until the relay has it
	}
	sets := make(map[string]*cache.Set, len(cache.TypeOrder))
	for _, typ := range cache.TypeOrder {
		ts, err := s.setLocked("relay/"+key, r, typ, func() []types.Resource { return r.ByType()[typ] })
		if err != nil {
			return nil, fmt.Errorf("relayed %s: %w", shortType(typ), err)
		}
		sets[typ] = ts
	}
	return sets, nil
}

// dropNode forgets the node of a stream being refused before it joined.
func (t *tracker) dropNode(key streamKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.streams[key]; st != nil {
		st.node = nil
	}
}
