package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Entry is one resource as served: its encoding and versions, shared by
// every set, key and stream that serves that content.
type Entry struct {
	name    string
	res     types.Resource
	version string     // HashResource of the encoding
	any     *anypb.Any // Value is the deterministic encoding
	delta   *discoveryv3.Resource
}

func newEntry(typeURL string, res types.Resource, b []byte) *Entry {
	name := xds.ResourceName(res)
	v := cachev3.HashResource(b)
	a := &anypb.Any{TypeUrl: typeURL, Value: b}
	return &Entry{name: name, res: res, version: v, any: a,
		delta: &discoveryv3.Resource{Name: name, Version: v, Resource: a}}
}

// Set is the resources of one type as one key serves them. Never
// changed once built; a new translation builds a new set, reusing the
// entries whose content did not change.
type Set struct {
	typeURL string
	version string
	entries map[string]*Entry
	order   []*Entry // entries sorted by name, for full responses and dumps
	// mark names the set among the versions a stream holds (answer.go);
	// prevMark is the mark of the set this one replaced ("" if none) and
	// diff the names added, changed or removed since. Marks, not
	// pointers, so that a set does not keep its predecessors alive.
	mark, prevMark string
	diff           []string
	// shared memoises, per distinct response, the resources every stream
	// sending it shares, so it is encoded once (codec.go). The one
	// mutable part of a set: guarded by Cache.mu, under which every
	// answer is built.
	shared map[shareKey]any
	// bytes is the encoded size of all entries; sharedBytes what the
	// memoised responses hold (bounded by maxSharedBytes).
	bytes, sharedBytes int
	// held memoises the maps of versions answers leave streams holding,
	// by predecessor and names, heldByContent by content (held.go); also
	// guarded by Cache.mu.
	held          map[heldKey]map[string]string
	heldByContent map[uint64]map[string]string
}

var typeSetIDs atomic.Uint64

// setVersion is the SotW version of a set: a hash of its names and
// resource versions, equal for equal content on every bridge.
func setVersion(entries []*Entry) string {
	h := sha256.New()
	var buf []byte
	for _, e := range entries {
		buf = binary.AppendUvarint(buf[:0], uint64(len(e.name)))
		buf = append(buf, e.name...)
		buf = append(buf, e.version...)
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// NewSet builds the set of items, reusing prev's entries for resources
// that are the same object or encode to the same bytes. If nothing
// differs from prev, it returns prev itself.
func NewSet(typeURL string, items []types.Resource, prev *Set) (*Set, error) {
	return NewSetEncoded(typeURL, items, prev, nil)
}

// NewSetEncoded is NewSet for items some of which arrived encoded
// (xds.Resources.Encoded: an agent relaying what the central bridge
// sent): an item found in enc, with typeURL's type, is served in those
// bytes, which it was decoded from, instead of being encoded again.
func NewSetEncoded(typeURL string, items []types.Resource, prev *Set, enc map[proto.Message]*anypb.Any) (*Set, error) {
	if prev.holdsExactly(items) {
		// The very objects, in its order: nothing to compare or encode
		// (an agent's relay builds every type anew when one changes).
		return prev, nil
	}
	ts := &Set{typeURL: typeURL, entries: make(map[string]*Entry, len(items)), mark: setMarkOf(typeSetIDs.Add(1))}
	var old map[string]*Entry
	if prev != nil {
		old, ts.prevMark = prev.entries, prev.mark
	}
	refreshed := false // an entry took a new object of the same content
	for _, res := range items {
		name := xds.ResourceName(res)
		if _, dup := ts.entries[name]; dup {
			return nil, fmt.Errorf("%s: two resources named %q", typeURL, name)
		}
		o := old[name]
		if o != nil && o.res == res {
			ts.entries[name] = o
			continue
		}
		var b []byte
		if a := enc[res]; a != nil && a.GetTypeUrl() == typeURL {
			b = a.GetValue()
		} else {
			var err error
			if b, err = cachev3.MarshalResource(res); err != nil {
				return nil, fmt.Errorf("marshal %s %q: %w", typeURL, name, err)
			}
		}
		if o != nil && bytes.Equal(o.any.GetValue(), b) {
			// The same content in a new object (an agent's relay that
			// redialled decodes everything again; a translation that made
			// a resource anew). The encoding is kept, and the entry takes
			// the new object so the next build finds it by identity:
			// keeping the old object made every later build encode this
			// resource again, for as long as the new one lived.
			e := *o
			e.res = res
			ts.entries[name] = &e
			refreshed = true
			continue
		}
		ts.entries[name] = newEntry(typeURL, res, b)
	}
	if prev != nil {
		for name, e := range ts.entries {
			// An entry's encoding (its Any) is shared by every entry of
			// the same content: a new Any is a new content.
			if o := old[name]; o == nil || o.any != e.any {
				ts.diff = append(ts.diff, name)
			}
		}
		for name := range old {
			if _, ok := ts.entries[name]; !ok {
				ts.diff = append(ts.diff, name)
			}
		}
		if len(ts.diff) == 0 && !refreshed {
			return prev, nil
		}
	}
	ts.order = slices.SortedFunc(maps.Values(ts.entries), byName)
	for _, e := range ts.order {
		ts.bytes += len(e.any.GetValue())
	}
	ts.version = setVersion(ts.order)
	return ts, nil
}

// holdsExactly reports whether ts's entries are items, the same objects
// in the same order (sorted by name, as both are).
func (ts *Set) holdsExactly(items []types.Resource) bool {
	if ts == nil || len(items) != len(ts.order) {
		return false
	}
	for i, res := range items {
		if ts.order[i].res != res {
			return false
		}
	}
	return true
}

// Name is the resource's name.
func (e *Entry) Name() string { return e.name }

// Resource is the resource itself: shared, never to be modified.
func (e *Entry) Resource() types.Resource { return e.res }

// Version is the resource's delta version: go-control-plane's
// HashResource of its encoding.
func (e *Entry) Version() string { return e.version }

// Version is the SotW version_info of the set (its names and resource
// versions hashed), "" for no set.
func (ts *Set) Version() string {
	if ts == nil {
		return ""
	}
	return ts.version
}

// Entries lists the set's resources sorted by name (not to be modified).
func (ts *Set) Entries() []*Entry { return ts.order }

// Resources returns the set's resources by name, as go-control-plane
// snapshots hold them.
func (ts *Set) Resources() map[string]types.Resource {
	out := make(map[string]types.Resource, len(ts.entries))
	for n, e := range ts.entries {
		out[n] = e.res
	}
	return out
}

// NewNames lists the names of a that b (nil: none) lacks.
func NewNames(a, b *Set) []string {
	var out []string
	for _, e := range a.order {
		if b == nil || b.entries[e.name] == nil {
			out = append(out, e.name)
		}
	}
	return out
}

// Adds reports whether a (nil: none) has names b (nil: none) lacks.
func Adds(a, b *Set) bool {
	if a == nil {
		return false
	}
	for name := range a.entries {
		if b == nil || b.entries[name] == nil {
			return true
		}
	}
	return false
}

// Union is target's resources and those of cur that target lacks, as a
// set chained to cur (so watches compare only the difference); target
// itself when cur has nothing target lacks.
func Union(target, cur *Set) (*Set, error) {
	if !Adds(cur, target) {
		return target, nil // cur's names are all in target
	}
	items := make([]types.Resource, 0, len(target.entries)+len(cur.entries))
	for _, e := range target.order {
		items = append(items, e.res)
	}
	for _, e := range cur.order {
		if target.entries[e.name] == nil {
			items = append(items, e.res)
		}
	}
	return NewSet(target.typeURL, items, cur)
}

// Any is the resource as sent: its deterministic encoding in an Any.
func (e *Entry) Any() *anypb.Any { return e.any }

// Has reports whether the set holds a resource named name.
func (ts *Set) Has(name string) bool { return ts.entries[name] != nil }
