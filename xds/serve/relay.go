package serve

import (
	"errors"
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

// ParseRelayKey is the RelayKey of a snapshot key (as RelayKey.Key):
// without its Envoy version class, since the relay fetches each
// node.cluster once and the server rewrites it per class (relaySetsLocked).
func ParseRelayKey(key string) RelayKey {
	nc, proxyless := cache.ParseKey(key)
	return RelayKey{Key: cache.BaseKey(key), NodeCluster: nc, Proxyless: proxyless}
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
		s.built = map[builtKey]map[string]*builtSet{}
		// Its chains go too, and with them the resources (its upstreams'
		// private keys among them) their sets were built from: Update,
		// which drops unused chains, never runs in relay mode, so an
		// agent would hold every node.cluster it ever relayed.
		for chain := range s.chains {
			if chainOfRole(chain, relayRole(key)) {
				delete(s.chains, chain)
				delete(s.chainFrom, chain)
			}
		}
		return nil, nil
	}
	s.relay[key] = r
	s.built = map[builtKey]map[string]*builtSet{}
	s.compat.Next()
	s.health.setServing()
	// Every class of the node.cluster that has streams; the others are
	// served when a stream of them arrives (sawNode).
	var changed []string
	var errs []error
	for _, k := range s.cache.Keys() {
		if cache.BaseKey(k) != key {
			continue
		}
		types, err := s.setKeyLocked(k)
		changed = append(changed, types...)
		errs = append(errs, err)
	}
	slices.Sort(changed)
	return slices.Compact(changed), errors.Join(errs...)
}

// relayRole is the role (setLocked) whose chains serve relay key key.
func relayRole(key string) string { return "relay/" + key }

// RelayKeys lists the keys set with SetRelay.
func (s *Server) RelayKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.relay))
}

// relaySetsLocked is setsLocked in relay mode: every type from the key's
// relayed resources.
func (s *Server) relaySetsLocked(key string) (map[string]*cache.Set, error) {
	// The relay fetches a node.cluster once, for the newest Envoy, and
	// rewrites it here for each older class among its local proxies.
	r := s.relay[cache.BaseKey(key)]
	if r == nil {
		return nil, ErrNoGoodState // waits until the relay has it
	}
	class := cache.KeyClass(key)
	notes := map[string]bool{}
	defer s.setDowngradedLocked(key, notes)
	sets := make(map[string]*cache.Set, len(cache.TypeOrder))
	byType := lazyByType(r)
	for _, typ := range cache.TypeOrder {
		ts, err := s.setLocked(relayRole(cache.BaseKey(key)), builtKey{r: r, class: class}, typ, notes, func() []types.Resource { return byType()[typ] })
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
		t.forgetNodeLocked(st)
		st.node = nil
	}
}
