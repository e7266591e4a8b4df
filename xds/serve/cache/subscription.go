package cache

import (
	"hash/maphash"
	"iter"
	"maps"
	"runtime"
	"slices"
	"sync"
	"weak"

	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// Subscription is a stream's view of one type, as the bridge's servers
// keep it: what go-control-plane's stream.Subscription keeps (the names
// subscribed, whether the stream is wildcard, what it holds at which
// version) and the same rules (the xDS protocol's "How the client
// specifies what resources to return", legacy wildcard included), with
// one difference: the names subscribed are a set that every stream
// subscribing the same names shares (nameSets), not a map of each
// stream's own. A fleet's proxies of one group ask for the same names,
// and a 50-cluster proxy's own map of its endpoints' names was ~2.2 KiB
// of its heap (bench/README.md). A set is never written once shared: a
// change of names makes a new one.
type Subscription struct {
	wildcard bool
	// legacyWildcard: the stream has not named a resource yet, so an
	// empty request still means every resource.
	legacyWildcard bool
	names          *nameSet // nil: none
	returned       map[string]string
}

var _ cachev3.Subscription = (*Subscription)(nil)

// explicitWildcard is the name that subscribes to every resource.
const explicitWildcard = "*"

// NewSotwSubscription is a SotW stream's subscription after its first
// request of a type, which named names.
func NewSotwSubscription(names []string) *Subscription {
	s := &Subscription{}
	s.initSotw(names)
	return s
}

func (s *Subscription) initSotw(names []string) {
	// Holding nothing is a nil map: the first answer gives the stream
	// what it holds (most often a map shared with every stream like it),
	// and an empty map made for every type of every stream was garbage.
	*s = Subscription{wildcard: len(names) == 0, legacyWildcard: true}
	s.SetNames(names)
}

// NewDeltaSubscription is a delta stream's after its first request of a
// type; held is what the client says it holds (initial_resource_versions),
// nil for nothing.
func NewDeltaSubscription(subscribe, unsubscribe []string, held map[string]string) *Subscription {
	s := &Subscription{}
	s.initDelta(subscribe, unsubscribe, held)
	return s
}

func (s *Subscription) initDelta(subscribe, unsubscribe []string, held map[string]string) {
	*s = Subscription{wildcard: len(subscribe) == 0, legacyWildcard: true, returned: held} // nil: as initSotw
	s.Update(subscribe, unsubscribe)
}

func (s *Subscription) SubscribedResources() map[string]struct{} { return s.names.set() }
func (s *Subscription) IsWildcard() bool                         { return s.wildcard }
func (s *Subscription) ReturnedResources() map[string]string     { return s.returned }

// SetReturnedResources sets what the stream holds (the cache's answers).
func (s *Subscription) SetReturnedResources(held map[string]string) { s.returned = held }

// SetNames takes a SotW request's names: the full set it wants. What the
// stream holds of names no longer wanted is forgotten (in place, as
// go-control-plane's; the servers give the stream its own copy first),
// so that subscribing again sends them again.
func (s *Subscription) SetNames(names []string) {
	if s.legacyWildcard {
		if len(names) == 0 {
			return // still wildcard
		}
		s.legacyWildcard = false
	}
	if ns := sharedNames(names); ns != nil { // no wildcard among them
		for n := range s.returned {
			if _, ok := ns.m[n]; !ok {
				delete(s.returned, n)
			}
		}
		s.wildcard, s.names = false, ns
		return
	}
	set := make(map[string]struct{}, len(names))
	explicit := false
	for _, n := range names {
		if n == explicitWildcard {
			explicit = true
			continue
		}
		set[n] = struct{}{}
	}
	if !explicit {
		for n := range s.returned {
			if _, ok := set[n]; !ok {
				delete(s.returned, n)
			}
		}
	}
	s.wildcard = explicit
	s.names = internNames(set)
}

// Update applies a delta request's subscribe and unsubscribe lists. A
// change of names copies the set (shared sets are never written): a
// client that grows its subscription one name per request pays for the
// set each time, where what it keeps is shared with every stream like it.
func (s *Subscription) Update(subscribe, unsubscribe []string) {
	if s.legacyWildcard {
		// Only subscribing ends the legacy behaviour (the protocol says
		// nothing of unsubscribing).
		if len(subscribe) == 0 {
			return
		}
		s.legacyWildcard = false
	}
	if s.names == nil && len(unsubscribe) == 0 {
		if ns := sharedNames(subscribe); ns != nil {
			s.names = ns
			return
		}
	}
	// names is the shared set until a name changes, then a copy of it.
	names, copied := s.names.set(), false
	own := func() {
		if !copied {
			names, copied = maps.Clone(names), true
			if names == nil {
				names = map[string]struct{}{}
			}
		}
	}
	for _, n := range subscribe {
		if n == explicitWildcard {
			s.wildcard = true
		} else if _, ok := names[n]; !ok {
			own()
			names[n] = struct{}{}
		}
	}
	for _, n := range unsubscribe {
		if n == explicitWildcard {
			s.wildcard = false
			continue
		}
		_, subscribed := names[n]
		if subscribed && s.wildcard {
			// Still wanted through the wildcard: held at no version, so
			// the next answer sends it again, or says it is gone.
			if s.returned == nil {
				s.returned = map[string]string{}
			}
			s.returned[n] = ""
		} else {
			delete(s.returned, n)
		}
		if subscribed {
			own()
			delete(names, n)
		}
	}
	if copied {
		s.names = internNames(names)
	}
}

// nameSet is a set of names that subscriptions share; never written once
// made (internNames).
type nameSet struct {
	m map[string]struct{}
}

func (n *nameSet) set() map[string]struct{} {
	if n == nil {
		return nil
	}
	return n.m
}

// nameSets interns the sets of names subscribed: a set is looked up by
// its digest (order-free) and content. It holds the sets weakly, so a set
// no stream subscribes to any more is collected and its entry dropped:
// a client cannot grow the table beyond what the streams hold.
var nameSets = struct {
	mu   sync.Mutex
	sets map[NamesDigest][]weak.Pointer[nameSet]
}{sets: map[NamesDigest][]weak.Pointer[nameSet]{}}

// internNames returns the shared set equal to set (which it may keep),
// nil for an empty one.
func internNames(set map[string]struct{}) *nameSet {
	if len(set) == 0 {
		return nil
	}
	d := digestOf(maps.Keys(set))
	if ns := findNames(d, func(m map[string]struct{}) bool { return maps.Equal(m, set) }); ns != nil {
		return ns
	}
	ns := &nameSet{m: set}
	nameSets.mu.Lock()
	nameSets.sets[d] = append(nameSets.sets[d], weak.Make(ns))
	nameSets.mu.Unlock()
	runtime.AddCleanup(ns, dropNameSets, d)
	return ns
}

// sharedNames is the interned set of a few distinct names, if some
// stream holds one, found without building a map: a stream's first
// request of a type names what many streams of its group name too, and
// the map Update built to find the shared set was garbage, a map per type
// of every proxy at a fleet's connect (bench/README.md, "Where a storm's
// memory stays"). nil when there is none, for more than
// maxSharedLookup names, duplicates or the wildcard (Update then builds
// the set).
func sharedNames(names []string) *nameSet {
	if len(names) == 0 || len(names) > maxSharedLookup {
		return nil
	}
	for i, n := range names {
		if n == explicitWildcard || slices.Contains(names[:i], n) {
			return nil
		}
	}
	return findNames(digestOf(slices.Values(names)), func(m map[string]struct{}) bool {
		return len(m) == len(names) && holdsAll(m, names)
	})
}

// findNames is an interned set of digest d that matches, nil if no
// stream holds one. Compared outside the lock (an edge proxy's set has
// thousands of names); two equal sets made at once may both be kept,
// which only shares less.
func findNames(d NamesDigest, matches func(map[string]struct{}) bool) *nameSet {
	var buf [4]weak.Pointer[nameSet]
	nameSets.mu.Lock()
	candidates := append(buf[:0], nameSets.sets[d]...)
	nameSets.mu.Unlock()
	for _, wp := range candidates {
		if ns := wp.Value(); ns != nil && matches(ns.m) {
			return ns
		}
	}
	return nil
}

// maxSharedLookup bounds sharedNames' quadratic check for duplicates.
const maxSharedLookup = 16

func holdsAll(set map[string]struct{}, names []string) bool {
	for _, n := range names {
		if _, ok := set[n]; !ok {
			return false
		}
	}
	return true
}

// dropNameSets forgets the collected sets of digest d.
func dropNameSets(d NamesDigest) {
	nameSets.mu.Lock()
	defer nameSets.mu.Unlock()
	live := nameSets.sets[d][:0]
	for _, wp := range nameSets.sets[d] {
		if wp.Value() != nil {
			live = append(live, wp)
		}
	}
	if len(live) == 0 {
		delete(nameSets.sets, d)
		return
	}
	nameSets.sets[d] = live
}

// NamesDigest identifies a set of resource names in any order, without
// holding them (an edge proxy's request names every cluster): a sum of
// seeded hashes (a client cannot aim at another set without the seed)
// and the count. Sets of names are interned by it (internNames), and the
// SotW server tells by it whether a request names what the one before did.
type NamesDigest struct {
	sum uint64
	n   int
}

var namesSeed = maphash.MakeSeed()

// DigestNames is the digest of names, in any order.
func DigestNames(names []string) NamesDigest { return digestOf(slices.Values(names)) }

// digestOf is the digest of the names seq yields.
func digestOf(names iter.Seq[string]) NamesDigest {
	var d NamesDigest
	for n := range names {
		d.sum += maphash.String(namesSeed, n)
		d.n++
	}
	return d
}
