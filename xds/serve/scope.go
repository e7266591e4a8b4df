package serve

import (
	"sync"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// What a node may see is decided in translation (xds.Output.Reach): a
// key's sets hold only its group's clusters, endpoints, listeners, routes
// and secrets, so a name outside them is never answered, wildcard or by
// name. This file makes that visible: a node in no group that gets
// nothing is NO_GROUP on /v1/proxies and warned about once; with
// authorize_nodes, a node asking by name for something that exists but
// is not its group's is logged (names only, never content) and counted.

// StatusNoGroup: the node matches no proxy group and the policy's
// unmatched_nodes is "none", so it is served nothing.
const StatusNoGroup = "NO_GROUP"

// maxRemembered bounds the nodes and names remembered for logging once;
// beyond it the memory starts over (and may log a node again), since
// clients choose their node ids.
const maxRemembered = 10000

// scopeLog is the state of that logging, with its own lock: it runs as
// watches open, under no Server lock.
type scopeLog struct {
	mu sync.Mutex
	// view is the current translation's: which keys get nothing, and
	// every name served to anyone.
	view *scopeView
	// warned holds node ids warned about as in no group; refusedSeen
	// "node\x00type\x00name" refusals already logged.
	warned      map[string]bool
	refusedSeen map[string]bool

	unmatched prometheus.Counter
	refused   *prometheus.CounterVec
}

// scopeView is one translation as the scope log needs it.
type scopeView struct {
	noGroup func(key string) bool
	once    sync.Once
	out     *xds.Output
	names   map[string]map[string]bool // type URL -> every name served
}

func newScopeLog(reg prometheus.Registerer, log zerolog.Logger) *scopeLog {
	l := &scopeLog{warned: map[string]bool{}, refusedSeen: map[string]bool{}}
	l.unmatched = register(reg, log, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "consul_xds_bridge_unmatched_nodes_total",
		Help: "Nodes that matched no proxy group and were served nothing (unmatched_nodes = \"none\"), counted once per node id.",
	}))
	l.refused = register(reg, log, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "consul_xds_bridge_refused_resources_total",
		Help: "Resources a node asked for by name that exist but are not its group's (authorize_nodes), by type; counted once per node and name.",
	}, []string{"type"}))
	// Known types start at zero, so rate() works from the first refusal.
	for _, typ := range cache.TypeOrder {
		l.refused.WithLabelValues(metricType(typ))
	}
	return l
}

// unmatchedServedLocked reports whether nodes in no group are served
// anything (unmatched_nodes = "all").
func (s *Server) unmatchedServedLocked() bool {
	return s.out == nil || !s.out.UnmatchedNone
}

// setScopeViewLocked records the translation just installed for the
// scope log.
func (s *Server) setScopeViewLocked() {
	out, resolve := s.out, s.resolve
	groups := out.Groups
	failed := out.Failed
	none := out.UnmatchedNone
	v := &scopeView{out: out, noGroup: func(key string) bool {
		nodeCluster, proxyless := cache.ParseKey(key)
		if !none || proxyless {
			return false
		}
		g := resolve(nodeCluster)
		return groups[g] == nil && failed[g] == nil
	}}
	s.scope.mu.Lock()
	s.scope.view = v
	s.scope.mu.Unlock()
}

// allNames is every name the translation serves to someone, by type.
func (v *scopeView) allNames() map[string]map[string]bool {
	v.once.Do(func() {
		v.names = map[string]map[string]bool{}
		add := func(r *xds.Resources) {
			if r == nil {
				return
			}
			for typ, items := range r.ByType() {
				if v.names[typ] == nil {
					v.names[typ] = map[string]bool{}
				}
				for _, res := range items {
					v.names[typ][xds.ResourceName(res)] = true
				}
			}
		}
		add(v.out.Shared)
		add(v.out.Proxyless)
		for _, g := range v.out.Groups {
			add(g)
		}
	})
	return v.names
}

// watched is told of every watch as it opens (before it is answered):
// it warns once about a node in no group, and logs and counts a request
// by name for what exists but is not the node's.
func (s *Server) watched(node *corev3.Node, typeURL string, sub cachev3.Subscription, namesChanged bool) {
	key := cache.Key(node)
	s.scope.mu.Lock()
	v := s.scope.view
	warn := v != nil && !s.scope.warned[node.GetId()] && v.noGroup(key)
	if warn {
		if len(s.scope.warned) >= maxRemembered {
			s.scope.warned = map[string]bool{}
		}
		s.scope.warned[node.GetId()] = true
	}
	s.scope.mu.Unlock()
	if warn {
		s.scope.unmatched.Inc()
		s.log.Warn().Str("node", truncate(node.GetId(), 256)).Str("node_cluster", truncate(node.GetCluster(), 256)).
			Msg("node matches no proxy group; unmatched_nodes is \"none\", so it is served nothing")
	}
	if v == nil || !s.cfg.AuthorizeNodes || !namesChanged {
		return
	}
	names := sub.SubscribedResources()
	if len(names) == 0 {
		return
	}
	ts := s.cache.Served(key)[typeURL]
	var refused []string
	for name := range names {
		if name == "*" || ts != nil && ts.Has(name) {
			continue
		}
		if v.allNames()[typeURL][name] {
			refused = append(refused, name)
		}
	}
	for _, name := range refused {
		id := node.GetId() + "\x00" + typeURL + "\x00" + name
		s.scope.mu.Lock()
		seen := s.scope.refusedSeen[id]
		if !seen {
			if len(s.scope.refusedSeen) >= maxRemembered {
				s.scope.refusedSeen = map[string]bool{}
			}
			s.scope.refusedSeen[id] = true
		}
		s.scope.mu.Unlock()
		if seen {
			continue
		}
		s.scope.refused.WithLabelValues(metricType(typeURL)).Inc()
		s.log.Warn().Str("node", truncate(node.GetId(), 256)).Str("node_cluster", truncate(node.GetCluster(), 256)).
			Str("type", typeURL).Str("name", truncate(name, 256)).
			Msg("refused a resource the node's group does not get; it is sent nothing for that name")
	}
}
