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

// setDowngradedLocked records what key is served differently. When a
// translation makes an already served key miss more (a policy starts
// using a newer feature), its proxies were warned about something else:
// it warns again, once for the key.
func (s *Server) setDowngradedLocked(key string, notes map[string]bool) {
	if cache.KeyClass(key).Current() {
		return
	}
	if s.downgraded == nil {
		s.downgraded = map[string][]string{}
	}
	prev, served := s.downgraded[key]
	next := slices.Sorted(maps.Keys(notes))
	s.downgraded[key] = next
	if !served {
		return // its proxies are told as they connect (warnOldEnvoy)
	}
	if more := slices.DeleteFunc(slices.Clone(next), func(n string) bool { return slices.Contains(prev, n) }); len(more) > 0 {
		nc, _ := cache.ParseKey(key)
		s.log.Warn().Str("node_cluster", nc).Str("envoy_class", cache.KeyClass(key).String()).Strs("downgraded", next).Strs("new", more).
			Msg("the proxies of an older Envoy now miss more of what they are served (downgraded lists it all)")
	}
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
	notes, computed := s.downgraded[key]
	if !computed {
		// Not served yet (before the first sync, or an agent whose relay
		// has nothing yet): what it misses is warned about for the key
		// once it is (setDowngradedLocked).
		if s.downgraded == nil {
			s.downgraded = map[string][]string{}
		}
		s.downgraded[key] = nil
	}
	if s.warned[node.GetId()] {
		s.mu.Unlock()
		return
	}
	if s.warned == nil || len(s.warned) >= maxWarnedNodes {
		s.warned = map[string]bool{}
	}
	s.warned[node.GetId()] = true
	s.mu.Unlock()
	below := v.Less(envoycompat.Oldest)
	if len(notes) == 0 && !below {
		s.log.Info().Str("node", node.GetId()).Str("group", node.GetCluster()).Str("envoy_version", v.String()).
			Msg("proxy runs an older Envoy; nothing it is served so far needs a newer one")
		return
	}
	ev := s.log.Warn().Str("node", node.GetId()).Str("group", node.GetCluster()).Str("envoy_version", v.String()).
		Str("oldest_supported", envoycompat.Oldest.String()).Strs("downgraded", notes)
	if below {
		ev.Msg("proxy runs an Envoy older than the oldest supported; it is served what that one understands")
		return
	}
	ev.Msg("proxy runs an older Envoy; it is served a rewritten copy without the newer fields (downgraded lists what it misses)")
}

// downgradedOf is what /v1/proxies shows a proxy of Envoy version v
// misses: its key's notes, after one saying so if v is below the range.
func downgradedOf(v string, notes []string) []string {
	if ver, ok := envoycompat.Parse(v); ok && ver.Less(envoycompat.Oldest) {
		return append([]string{"Envoy " + v + " is older than the oldest supported, " + envoycompat.Oldest.String() + ": served as " + envoycompat.Oldest.String()}, notes...)
	}
	return notes
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
