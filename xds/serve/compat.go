package serve

import (
	"maps"
	"slices"
	"strconv"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/envoycompat"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
)

// Envoy versions: an Envoy older than the newest feature is keyed by its
// version class (cache.Key) and served envoycompat's rewritten copies
// (setLocked memoises them per class and translation). What its key was
// served differently is kept here for /v1/proxies and the log.

// setDowngradedLocked records what key is served differently.
func (s *Server) setDowngradedLocked(key string, notes map[string]bool) {
	if len(notes) == 0 {
		delete(s.downgraded, key)
		return
	}
	if s.downgraded == nil {
		s.downgraded = map[string][]string{}
	}
	s.downgraded[key] = slices.Sorted(maps.Keys(notes))
}

// maxWarnedNodes bounds the node ids remembered as warned about (node ids
// are the clients' choice); past it, the memory starts again.
const maxWarnedNodes = 10000

// warnOldEnvoy logs, once per node id, that a node's Envoy is served a
// rewritten copy and what it lacks; nothing for the newest Envoys.
func (s *Server) warnOldEnvoy(node *corev3.Node) {
	v, ok := envoycompat.FromNode(node)
	if !ok || envoycompat.ClassOf(v).Current() {
		return
	}
	key := cache.Key(node)
	s.mu.Lock()
	notes := s.downgraded[key]
	if s.warned[node.GetId()] {
		s.mu.Unlock()
		return
	}
	if s.warned == nil || len(s.warned) >= maxWarnedNodes {
		s.warned = map[string]bool{}
	}
	s.warned[node.GetId()] = true
	s.mu.Unlock()
	ev := s.log.Warn().Str("node", node.GetId()).Str("group", node.GetCluster()).Str("envoy_version", v.String()).
		Str("oldest_supported", envoycompat.Oldest.String()).Strs("downgraded", notes)
	if v.Less(envoycompat.Oldest) {
		ev.Msg("proxy runs an Envoy older than the oldest supported; it is served what that one understands")
		return
	}
	ev.Msg("proxy runs an older Envoy; it is served a rewritten copy without the newer fields (downgraded lists what it misses)")
}

// envoyVersion is what /v1/proxies shows of a node's Envoy version.
func envoyVersion(n *corev3.Node) string {
	if v, ok := envoycompat.FromNode(n); ok {
		return v.String()
	}
	return ""
}

// baseKeys counts the keys (one per Envoy version class) of each
// node.cluster, for the relay's OnKey and OnKeyGone: a node.cluster is
// relayed once whatever versions its proxies run. Its lock is held while
// they are told, so a join and a leave of one node.cluster are told in
// the order they happened.
type baseKeys struct {
	mu sync.Mutex
	n  map[string]int
}

// join calls first if key is its node.cluster's first key.
func (b *baseKeys) join(key string, first func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == nil {
		b.n = map[string]int{}
	}
	base := cache.BaseKey(key)
	b.n[base]++
	if b.n[base] == 1 {
		first()
	}
}

// leave calls last if key was its node.cluster's last key.
func (b *baseKeys) leave(key string, last func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	base := cache.BaseKey(key)
	if b.n[base]--; b.n[base] <= 0 {
		delete(b.n, base)
		last()
	}
}

func userAgent(n *corev3.Node) string {
	name := n.GetUserAgentName()
	v := n.GetUserAgentVersion()
	if bv := n.GetUserAgentBuildVersion().GetVersion(); v == "" && bv != nil {
		v = strconv.FormatUint(uint64(bv.GetMajorNumber()), 10) + "." +
			strconv.FormatUint(uint64(bv.GetMinorNumber()), 10) + "." +
			strconv.FormatUint(uint64(bv.GetPatch()), 10)
	}
	if name != "" && v != "" {
		return name + "/" + v
	}
	return name
}
