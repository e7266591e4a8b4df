package serve

import (
	"errors"
	"slices"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/envoycompat"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// What a key is served from the current translation: its role (a group,
// the proxyless clients, or none), and the sets of that role's resources,
// built once per translation and chained to the role's previous sets so
// that the cache compares only what changed. Everything here holds
// Server.mu.

// noResources is the group part of a node.cluster in no group.
var noResources = &xds.Resources{}

// ErrNoGoodState: the key's group failed and never translated cleanly,
// so there is nothing to serve it (REST answers 503, as config_dump).
var ErrNoGoodState = errors.New("group has no last good state")

// setsLocked returns the sets a key is served from the current
// translation: the clusters and endpoints its role reaches, its group's
// listeners and routes (the last good ones if the group failed), and the
// secrets of both in one SDS type.
func (s *Server) setsLocked(key string) (map[string]*cache.Set, error) {
	if s.cfg.Relay {
		return s.relaySetsLocked(key)
	}
	role, group, reach := s.roleLocked(key)
	if group == nil {
		return nil, ErrNoGoodState
	}
	class := cache.KeyClass(key)
	notes := map[string]bool{}
	sets := make(map[string]*cache.Set, len(cache.TypeOrder))
	for _, part := range []struct {
		chain string
		res   *xds.Resources
		types []string
	}{
		{"reach/" + role, reach, []string{resourcev3.ClusterType, resourcev3.EndpointType}},
		{role, group, []string{resourcev3.ListenerType, resourcev3.RouteType}},
	} {
		byType := lazyByType(part.res)
		for _, typ := range part.types {
			ts, err := s.setLocked(part.chain, builtKey{r: part.res, class: class}, typ, notes, func() []types.Resource { return byType()[typ] })
			if err != nil {
				return nil, err
			}
			sets[typ] = ts
		}
	}
	// SDS: the secrets of the reached clusters (upstream TLS) and the
	// group's (listener TLS) in one type. Its version moves when a
	// certificate does, and nothing else does: listeners and clusters name
	// secrets, they do not hold them.
	// Built from both: the key names each, as two roles may share one
	// (the empty resources of a role with no group).
	ts, err := s.setLocked("secrets/"+role, builtKey{r: group, extra: reach, class: class}, resourcev3.SecretType, notes, func() []types.Resource {
		secrets := append(reach.ByType()[resourcev3.SecretType], group.ByType()[resourcev3.SecretType]...)
		slices.SortFunc(secrets, func(a, b types.Resource) int {
			return strings.Compare(xds.ResourceName(a), xds.ResourceName(b))
		})
		return secrets
	})
	if err != nil {
		return nil, err
	}
	sets[resourcev3.SecretType] = ts
	s.setDowngradedLocked(key, notes)
	return sets, nil
}

// roleLocked is what a key is served from: its role (a chain name:
// "group/G", "proxyless" or "none"), its group part (nil if its group
// failed and never translated cleanly) and the clusters, endpoints and
// upstream secrets it reaches. A proxyless gRPC client whose node.cluster
// names a proxyless group is served as that group (which may narrow it);
// any other proxyless client as the proxyless clients in general.
func (s *Server) roleLocked(key string) (role string, group, reach *xds.Resources) {
	nodeCluster, proxyless := cache.ParseKey(key)
	g := s.resolve(nodeCluster)
	inGroup := s.out.Groups[g] != nil || s.out.Failed[g] != nil
	switch {
	case inGroup && (!proxyless || s.groupProxylessLocked(g)):
		role, reach = "group/"+g, s.out.Reach[g]
	case proxyless:
		role, reach = "proxyless", s.out.ProxylessReach
	default:
		role, group, reach = "none", noResources, s.out.Unmatched
	}
	if group == nil {
		group = s.lastGood[role]
	}
	if reach == nil {
		reach = noResources // an Output made without reach
	}
	return role, group, reach
}

// groupProxylessLocked reports whether group g is declared proxyless.
func (s *Server) groupProxylessLocked(g string) bool { return s.out.ProxylessGroups[g] }

// builtKey is a translation's resource set (r, and extra when a set's
// items come from two) as served to one Envoy version class: keys of one
// class share it, so a rewrite is done once per class and translation,
// never per proxy. Resources are never modified once in an Output, so
// the same pointers give the same items.
type builtKey struct {
	r, extra *xds.Resources
	class    envoycompat.Class
}

// chainSource is what a chain's latest set was built from, and what its
// class was served differently.
type chainSource struct {
	from  builtKey
	notes []string
}

// builtSet is a set and what its class was served differently.
type builtSet struct {
	set   *cache.Set
	notes []string
}

// chainName names role's chain of typ for class: role, type and, for an
// older Envoy's class, the class, joined by NULs (a type URL holds none).
func chainName(role, typ string, class envoycompat.Class) string {
	if class.Current() {
		return role + "\x00" + typ
	}
	return role + "\x00" + typ + "\x00" + class.String()
}

// chainOfRole reports whether chain is one of role's (chainName): its
// role, then a type, so role "a" never claims role "a\x00x"'s (a
// node.cluster, and so a relay role, may hold any byte).
func chainOfRole(chain, role string) bool {
	rest, ok := strings.CutPrefix(chain, role+"\x00")
	typ, _, _ := strings.Cut(rest, "\x00")
	return ok && slices.Contains(cache.TypeOrder, typ)
}

// setLocked returns the set of typ built from bk's items as served to
// Envoys of bk's class (envoycompat's rewritten copies for an older one),
// once per translation, chained to the role's previous set of that type
// and class; it adds what the class was served differently to notes.
//
// A chain whose latest set was built from the same resources is served
// that set again without building it: an endpoint flip patches only the
// resources that hold the flipped cluster (xds/endpointsonly.go), so every
// other group keeps its sets, and a change costs what it changes, not a
// set per group and type (issue 40: a third of the CPU per flip with 50
// groups).
func (s *Server) setLocked(role string, bk builtKey, typ string, notes map[string]bool, items func() []types.Resource) (*cache.Set, error) {
	chain := chainName(role, typ, bk.class)
	if s.usedChains == nil {
		s.usedChains = map[string]bool{}
	}
	if s.chainFrom == nil {
		s.chainFrom = map[string]chainSource{}
	}
	s.usedChains[chain] = true
	if s.keyChains != nil {
		*s.keyChains = append(*s.keyChains, chain)
	}
	if b := s.built[bk][typ]; b != nil {
		s.chains[chain] = b.set
		s.chainFrom[chain] = chainSource{bk, b.notes}
		addNotes(notes, b.notes)
		return b.set, nil
	}
	var (
		ts         *cache.Set
		downgraded []string
	)
	if from, ok := s.chainFrom[chain]; ok && from.from == bk && s.chains[chain] != nil {
		ts, downgraded = s.chains[chain], from.notes
	} else {
		var served []types.Resource
		served, downgraded = s.compat.Rewrite(bk.class, items())
		var err error
		var enc map[proto.Message]*anypb.Any
		if bk.r != nil {
			enc = bk.r.Encoded
		}
		if ts, err = cache.NewSetEncoded(typ, served, s.chains[chain], enc); err != nil {
			return nil, err
		}
		s.setBuilds++
	}
	s.chains[chain] = ts
	s.chainFrom[chain] = chainSource{bk, downgraded}
	if s.built == nil {
		s.built = map[builtKey]map[string]*builtSet{}
	}
	if s.built[bk] == nil {
		s.built[bk] = map[string]*builtSet{}
	}
	s.built[bk][typ] = &builtSet{ts, downgraded}
	addNotes(notes, downgraded)
	return ts, nil
}

func addNotes(to map[string]bool, notes []string) {
	for _, n := range notes {
		to[n] = true
	}
}

// lazyByType lists r's resources by type once, when first asked: a key
// builds a type's set only where the memo misses, and ByType copies
// every resource of every type.
func lazyByType(r *xds.Resources) func() map[string][]types.Resource {
	var byType map[string][]types.Resource
	return func() map[string][]types.Resource {
		if byType == nil {
			byType = r.ByType()
		}
		return byType
	}
}
