package cache

import (
	"hash/maphash"
	"maps"
	"strconv"
	"sync/atomic"
)

// What a stream holds of a type (its subscription's returned resources:
// every name it was sent, at its version, and the set's mark) is, after an
// answer, a function of what it held before, the names the answer sent or
// removed, and the set. Streams that follow the same names therefore hold
// the same map, and each kept a copy: one entry per resource per type per
// proxy, the largest part of a stream's heap once gRPC's is set aside
// (~5.6 KiB of a 50-cluster proxy's, bench/README.md).
//
// Instead, the map an answer leaves is memoised in the set, keyed by the
// map held before and the answer's names, and streams share it:
//
//   - a shared map carries SharedMark (its identity, for that key) and is
//     never written again. The bridge's servers give a stream its own copy
//     before a request edits the map in place (OwnHeld); answers to the
//     watches of other callers, which edit what they are given, copy it
//     (own false);
//   - a stream that held nothing, or a shared map, is answered with the
//     memoised successor: after the first stream, a lookup, no copy;
//   - a stream holding a map of its own (a reconnecting client's
//     initial_resource_versions, or one a request edited) is answered in
//     place, as before, and then looks for an equal shared map by content,
//     so it shares again from then on.
//
// A set memoises at most MaxHeldMaps maps; past that, answers leave maps of
// their own, as before sharing existed.
const SharedMark = "\x00shared"

const MaxHeldMaps = 256

// heldIDs numbers shared maps: a successor's key names its predecessor.
var heldIDs atomic.Uint64

// heldSeed hashes a map's content for the lookup by content.
var heldSeed = maphash.MakeSeed()

// heldKey is a memoised successor's: the predecessor's identity ("": it
// held nothing; fullHeld: a SotW full-state answer, which replaces
// whatever was held) and the answer's names (namesKey of what it sent and
// removed).
type heldKey struct{ prev, names string }

// fullHeld stands for the predecessor of a SotW full-state answer.
const fullHeld = "\x00full"

// IsShared reports whether held, what a stream holds, is a map streams
// share: never to be written (OwnHeld copies it first).
func IsShared(held map[string]string) bool {
	_, ok := held[SharedMark]
	return ok
}

// OwnHeld gives sub a copy of its own of what it holds, if that is shared,
// before a request edits it in place (go-control-plane's subscription
// drops unsubscribed names from it).
func OwnHeld(sub *Subscription) {
	if held := sub.ReturnedResources(); IsShared(held) {
		own := maps.Clone(held)
		delete(own, SharedMark)
		sub.SetReturnedResources(own)
	}
}

// heldAfter is what a stream holds once answered changed and removed
// (names is their namesKey) from ts, having held prev. own: the caller
// is the bridge's server, which never writes a shared map (OwnHeld), and
// a map of the stream's own (it carries the set mark) may be edited in
// place. Called under the cache's lock.
func (ts *Set) heldAfter(prev map[string]string, changed []*Entry, removed []string, names string, own bool) map[string]string {
	if id, shared := prev[SharedMark]; !own || shared || len(prev) == 0 {
		return ts.successor(heldKey{prev: id, names: names}, prev, changed, removed, own)
	}
	m := prev
	if _, ours := prev[SetMark]; !ours {
		m = make(map[string]string, len(prev)+len(changed)+1)
		maps.Copy(m, prev)
	}
	return ts.keep(ts.apply(m, changed, removed))
}

// fullHeldFor is what a stream holds after a SotW full-state answer that
// sent send (names: their namesKey): only those, whatever it held.
func (ts *Set) fullHeldFor(send []*Entry, names string, own bool) map[string]string {
	return ts.successor(heldKey{prev: fullHeld, names: names}, nil, send, nil, own)
}

// successor is prev (a shared map, or none) answered changed and removed:
// the memoised map for key, or a new one, memoised if own.
func (ts *Set) successor(key heldKey, prev map[string]string, changed []*Entry, removed []string, own bool) map[string]string {
	if m, ok := ts.held[key]; ok && own {
		return m
	}
	m := make(map[string]string, len(prev)+len(changed)+1)
	maps.Copy(m, prev)
	delete(m, SharedMark) // its own, if the set has no room
	ts.apply(m, changed, removed)
	if !own {
		return m
	}
	return ts.memo(key, m)
}

func (ts *Set) apply(m map[string]string, changed []*Entry, removed []string) map[string]string {
	for _, name := range removed {
		delete(m, name)
	}
	for _, e := range changed {
		m[e.name] = e.version
	}
	m[SetMark] = ts.mark
	return m
}

// memo is keep, remembering the result under key when it is shared.
func (ts *Set) memo(key heldKey, m map[string]string) map[string]string {
	m = ts.keep(m)
	if IsShared(m) && len(ts.held) < MaxHeldMaps {
		if ts.held == nil {
			ts.held = map[heldKey]map[string]string{}
		}
		ts.held[key] = m
	}
	return m
}

// keep is the shared map with m's content: one the set already has, or m
// made shared if there is room, or m as it is. Looking by content is what
// lets streams that came to the same names differently (a reconnect with
// the versions it holds, a request that edited its map) share again.
func (ts *Set) keep(m map[string]string) map[string]string {
	if len(ts.heldByContent) >= MaxHeldMaps {
		return m // full: not even hashed, as before sharing existed
	}
	sum := heldSum(m)
	c, taken := ts.heldByContent[sum]
	if taken && sameHeld(c, m) {
		return c
	}
	if taken {
		return m // a collision: m stays the stream's own
	}
	m[SharedMark] = strconv.FormatUint(heldIDs.Add(1), 36)
	if ts.heldByContent == nil {
		ts.heldByContent = map[uint64]map[string]string{}
	}
	ts.heldByContent[sum] = m
	return m
}

// heldSum hashes a map's names and versions, marks aside, in any order.
func heldSum(m map[string]string) uint64 {
	var sum uint64
	var h maphash.Hash
	h.SetSeed(heldSeed)
	for name, v := range m {
		if Marked(name) {
			continue
		}
		h.Reset()
		h.WriteString(name)
		h.WriteByte(0)
		h.WriteString(v)
		sum += h.Sum64()
	}
	return sum
}

// sameHeld is whether a and b hold the same names at the same versions,
// marks aside (both carry the set's mark).
func sameHeld(a, b map[string]string) bool {
	n := 0
	for name, v := range a {
		if Marked(name) {
			continue
		}
		n++
		if w, ok := b[name]; !ok || w != v {
			return false
		}
	}
	for name := range b {
		if !Marked(name) {
			n--
		}
	}
	return n == 0
}
