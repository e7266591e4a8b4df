package serve

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// The serving cache: per-resource versions, every resource marshalled once.
//
// go-control-plane's snapshot cache versions a whole type at a time: when
// one ClusterLoadAssignment changes, every SotW stream subscribed to any
// endpoints gets all of its subscribed endpoints again, each stream
// marshalling them itself, and every delta stream computes its diff by
// walking all resources. At a thousand edge proxies holding a thousand
// clusters each, one health flip became gigabytes of responses
// (bench/README.md). This cache serves the bridge's own SotW and delta
// servers (sotw.go, delta.go; it keeps go-control-plane's cache interface
// for the tests that drive it directly), and:
//
//   - versions each resource by the hash of its deterministic encoding
//     (go-control-plane's HashResource, so delta clients reconnecting with
//     initial_resource_versions keep what they have), and each type by a
//     hash of its names and resource versions (SotW version_info): a
//     restarted bridge or a replica serves the same versions;
//   - answers SotW EDS, RDS and SDS with only the resources the stream does
//     not hold at their current version, as the xDS protocol allows for
//     those types (LDS and CDS are full state: every response carries all
//     of them); the stream's per-resource knowledge is its (go-control-
//     plane's) Subscription.ReturnedResources, which also keeps a NACKing client
//     from being sent the version it rejected again and again;
//   - marshals each resource once per content and shares the marshalled
//     Any (and the delta Resource around it) between every stream and key
//     that serves it, and encodes a response that many streams receive at
//     one version once, only its nonce being each stream's (codec.go);
//   - compares, on an update, only the resources that changed: each type
//     set remembers its predecessor and the names that differ, and a watch
//     remembers the set it was last checked against, so a health flip costs
//     each open watch a lookup of one name, whatever the fleet holds.

// entry is one resource as served.
type entry struct {
	name    string
	res     types.Resource
	version string     // HashResource of the encoding
	any     *anypb.Any // Value is the deterministic encoding
	delta   *discoveryv3.Resource
}

func newEntry(typeURL string, res types.Resource, b []byte) *entry {
	name := xds.ResourceName(res)
	v := cachev3.HashResource(b)
	a := &anypb.Any{TypeUrl: typeURL, Value: b}
	return &entry{name: name, res: res, version: v, any: a,
		delta: &discoveryv3.Resource{Name: name, Version: v, Resource: a}}
}

// typeSet is the resources of one type as one key serves them. Never
// changed once built; a new translation builds a new set, reusing the
// entries whose content did not change.
type typeSet struct {
	typeURL string
	version string
	entries map[string]*entry
	order   []*entry // entries sorted by name, for full responses and dumps
	// mark names the set among the versions a stream holds (answer.go);
	// prevMark is the mark of the set this one replaced ("" if none) and
	// diff the names added, changed or removed since. Marks, not
	// pointers, so that a set does not keep its predecessors alive.
	mark, prevMark string
	diff           []string
	// shared memoises, per distinct response, the resources every stream
	// sending it shares, so it is encoded once (codec.go). The one
	// mutable part of a set: guarded by serveCache.mu, under which every
	// answer is built.
	shared map[shareKey]any
	// bytes is the encoded size of all entries; sharedBytes what the
	// memoised responses hold (bounded by maxSharedBytes).
	bytes, sharedBytes int
	// held memoises the maps of versions answers leave streams holding,
	// by predecessor and names, heldByContent by content (held.go); also
	// guarded by serveCache.mu.
	held          map[heldKey]map[string]string
	heldByContent map[uint64]map[string]string
}

var typeSetIDs atomic.Uint64

// setVersion is the SotW version of a set: a hash of its names and
// resource versions, equal for equal content on every bridge.
func setVersion(entries []*entry) string {
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

// newTypeSet builds the set of items, reusing prev's entries for resources
// that are the same object or encode to the same bytes. If nothing
// differs from prev, it returns prev itself.
func newTypeSet(typeURL string, items []types.Resource, prev *typeSet) (*typeSet, error) {
	ts := &typeSet{typeURL: typeURL, entries: make(map[string]*entry, len(items)), mark: setMarkOf(typeSetIDs.Add(1))}
	var old map[string]*entry
	if prev != nil {
		old, ts.prevMark = prev.entries, prev.mark
	}
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
		b, err := cachev3.MarshalResource(res)
		if err != nil {
			return nil, fmt.Errorf("marshal %s %q: %w", typeURL, name, err)
		}
		if o != nil && bytes.Equal(o.any.GetValue(), b) {
			ts.entries[name] = o
			continue
		}
		ts.entries[name] = newEntry(typeURL, res, b)
	}
	if prev != nil {
		for name, e := range ts.entries {
			if old[name] != e {
				ts.diff = append(ts.diff, name)
			}
		}
		for name := range old {
			if _, ok := ts.entries[name]; !ok {
				ts.diff = append(ts.diff, name)
			}
		}
		if len(ts.diff) == 0 {
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

// keyState is the one record of a snapshot key (a node.cluster, marked
// for proxyless clients): what it is served, the streams that announced it
// and the watches open on it. sets is nil until the key is first set:
// requests wait until then. The versions a key is served are its sets'.
type keyState struct {
	sets map[string]*typeSet
	// streams counts the streams whose node announced the key (from their
	// first request); the key is dropped with the last (leave).
	streams int
	sotw    map[string]map[*sotwWatch]struct{}  // type URL ->
	delta   map[string]map[*deltaWatch]struct{} // type URL ->
	// fan is the fan-out of the latest update that answered a watch.
	fan *fanout
}

// A watch's order is its stream's (streams are numbered as they open):
// set answers a key's watches in that order, so the streams handed an
// update reach their proxies in the same order every time and each
// proxy's pushes are as far apart as the builds (at most one per
// debounce window, however long the fan-out takes). In map order, a
// proxy last in one fan-out and first in the next got two pushes within
// a fraction of a window.
type sotwWatch struct {
	order uint64
	req   *cachev3.Request
	sub   cachev3.Subscription
	send  func(cachev3.Response) // as deltaWatch.send
	seen  string                 // the mark of the set this watch was last found up to date with
	// own: the bridge's SotW server, which lets answers edit the versions
	// a stream holds in place (answer.go).
	own bool
}

type deltaWatch struct {
	order uint64
	req   *cachev3.DeltaRequest
	sub   cachev3.Subscription
	// send hands an answer to the stream, under the cache's lock: it
	// must not block (adsStream.deliver queues it).
	send func(cachev3.DeltaResponse)
	seen string
	own  bool // as sotwWatch.own
}

// serveCache is the cache the xDS servers watch (see the top of this file).
type serveCache struct {
	mu   sync.Mutex
	keys map[string]*keyState
	// watched, if set, is told of every watch before it opens, under no
	// lock (Server.watched: logging what a node is not served).
	// namesChanged is false for a request that only acknowledges (its
	// subscription is what was checked before): the names are not walked
	// again once per proxy per push.
	watched func(node *corev3.Node, typeURL string, sub cachev3.Subscription, namesChanged bool)
	// fanned, if set, is told each update's fan-out time (fanout.go).
	fanned func(time.Duration)
}

var _ cachev3.Cache = (*serveCache)(nil)

// newServeCache returns a cache holding the shared key "" (nodes that
// announce no node.cluster), which is never dropped.
func newServeCache() *serveCache {
	c := &serveCache{keys: map[string]*keyState{}}
	c.keyLocked("")
	return c
}

// typeOrder is the order one update is answered in on an ADS stream:
// clusters before their endpoints, listeners before their routes (Envoy's
// make-before-break order), secrets last (they only replace certificates
// of resources that already name them).
var typeOrder = []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType, resourcev3.SecretType}

func (c *serveCache) keyLocked(key string) *keyState {
	k := c.keys[key]
	if k == nil {
		k = &keyState{sotw: map[string]map[*sotwWatch]struct{}{}, delta: map[string]map[*deltaWatch]struct{}{}}
		c.keys[key] = k
	}
	return k
}

// set serves sets under an existing key (one that a stream joined, or
// the shared key), answers the watches that now have something to
// receive, and returns the type URLs whose set changed.
func (c *serveCache) set(key string, sets map[string]*typeSet) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.keys[key]
	if k == nil {
		return nil // its last stream left while the update was building
	}
	old := k.sets
	k.sets = sets
	var fan *fanout
	if c.fanned != nil {
		fan = newFanout(c.fanned)
	}
	answered := false
	var changed []string
	for _, typ := range typeOrder {
		ts := sets[typ]
		if old != nil && old[typ] == ts {
			continue
		}
		if old == nil || old[typ].version != ts.version {
			changed = append(changed, typ)
		}
		for _, w := range inOrder(k.sotw[typ]) {
			if resp := sotwAnswer(w.req, w.sub, ts, w.seen, w.own); resp != nil {
				delete(k.sotw[typ], w)
				answered = fan.attach(resp, false) || answered
				w.send(resp)
				continue
			}
			w.seen = ts.mark
		}
		for _, w := range inOrder(k.delta[typ]) {
			if resp := deltaAnswer(w.req, w.sub, ts, w.seen, w.own); resp != nil {
				delete(k.delta[typ], w)
				answered = fan.attach(resp, false) || answered
				w.send(resp)
				continue
			}
			w.seen = ts.mark
		}
	}
	// The latest update's fan-out, for streams catching up with it; none
	// if it answered nobody (an older one is not this update's).
	k.fan = nil
	if answered {
		k.fan = fan
		fan.handed() // the cache's own count: answering is over
	}
	return changed
}

// keyNames lists every key, sorted.
func (c *serveCache) keyNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.keys))
}

// join counts a stream that announced key and reports whether the key
// still needs its sets.
func (c *serveCache) join(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.keyLocked(key)
	k.streams++
	return k.sets == nil
}

// leave uncounts a stream of key and drops the key with its last stream,
// reporting whether it did
// (watches are cancelled before the stream's close is reported). The
// shared key stays. Counting and dropping under one lock means a stream
// announcing the key again never finds it half forgotten.
func (c *serveCache) leave(key string) (dropped bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.keys[key]
	if k == nil {
		return false
	}
	if k.streams--; k.streams > 0 || key == "" {
		return false
	}
	for _, ws := range k.sotw {
		if len(ws) > 0 {
			return false
		}
	}
	for _, ws := range k.delta {
		if len(ws) > 0 {
			return false
		}
	}
	delete(c.keys, key)
	return true
}

// served returns what key is served, nil if it was never set.
func (c *serveCache) served(key string) map[string]*typeSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := c.keys[key]; k != nil {
		return k.sets
	}
	return nil
}

// CreateWatch is go-control-plane's SotW watch, kept for the
// cachev3.Cache interface and the tests that drive the cache the way
// go-control-plane's SotW server did (answers copy the held versions);
// the bridge's own SotW server (sotw.go) calls openSotw.
func (c *serveCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	return c.openSotwWatch(0, req, sub, "", false, func(r cachev3.Response) { ch <- r; handedOver(r) }), nil
}

// openSotw is openDelta for SotW. sameNames says the request names what
// the previous one of its type did, so the versions the stream holds are
// what the last answer left (see heldMark).
func (c *serveCache) openSotw(order uint64, req *cachev3.Request, sub cachev3.Subscription, sameNames bool, send func(cachev3.Response)) func() {
	seen := ""
	if sameNames && req.GetResponseNonce() != "" {
		seen = sub.ReturnedResources()[setMark]
	}
	return c.openSotwWatch(order, req, sub, seen, true, send)
}

func (c *serveCache) openSotwWatch(order uint64, req *cachev3.Request, sub cachev3.Subscription, held string, own bool, send func(cachev3.Response)) func() {
	if c.watched != nil {
		c.watched(req.GetNode(), req.GetTypeUrl(), sub, held == "")
	}
	w := &sotwWatch{order: order, req: trimRequest(req), sub: sub, send: send, own: own}
	return c.open(req.GetNode(), req.GetTypeUrl(), held != "", func(ts *typeSet, fan *fanout) bool {
		resp := sotwAnswer(req, sub, ts, held, own)
		if resp != nil {
			fan.attach(resp, true)
			send(resp)
		}
		return resp != nil
	}, func(k *keyState, seen string) func() {
		w.seen = seen
		return addLocked(c, k.sotw, req.GetTypeUrl(), w)
	})
}

// CreateDeltaWatch is go-control-plane's delta watch, kept likewise; the
// bridge's own delta server (delta.go) calls openDelta.
func (c *serveCache) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse) (func(), error) {
	return c.openDeltaWatch(0, req, sub, false, func(r cachev3.DeltaResponse) { ch <- r; handedOver(r) }), nil
}

// openDelta answers req at once through send if the stream lacks
// something, or files a watch that set answers; it returns the cancel.
func (c *serveCache) openDelta(order uint64, req *cachev3.DeltaRequest, sub cachev3.Subscription, send func(cachev3.DeltaResponse)) func() {
	return c.openDeltaWatch(order, req, sub, true, send)
}

func (c *serveCache) openDeltaWatch(order uint64, req *cachev3.DeltaRequest, sub cachev3.Subscription, own bool, send func(cachev3.DeltaResponse)) func() {
	held := heldMark(req, sub)
	if c.watched != nil {
		c.watched(req.GetNode(), req.GetTypeUrl(), sub, held == "")
	}
	w := &deltaWatch{order: order, req: trimDeltaRequest(req), sub: sub, send: send, own: own}
	return c.open(req.GetNode(), req.GetTypeUrl(), held != "", func(ts *typeSet, fan *fanout) bool {
		resp := deltaAnswer(req, sub, ts, held, own)
		if resp != nil {
			fan.attach(resp, true)
			send(resp)
		}
		return resp != nil
	}, func(k *keyState, seen string) func() {
		w.seen = seen
		return addLocked(c, k.delta, req.GetTypeUrl(), w)
	})
}

// open answers a new watch at once if its key is served and answer finds
// something to send; otherwise wait files it (with the set it is up to
// date with, nil before the key is first set) and returns its cancel.
//
// answer is also given, when the request only acknowledges (acks: it
// holds what it was sent), the key's latest update's fan-out (else nil):
// an answer to a stream that had no watch filed when the update was
// served (its proxy was still acknowledging the one before) belongs to
// that update's fan-out while it is still open (fanout.attach).
func (c *serveCache) open(node *corev3.Node, typ string, acks bool, answer func(*typeSet, *fanout) bool, wait func(k *keyState, seen string) func()) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.keyLocked(snapshotKey(node))
	var seen string
	if k.sets != nil {
		// Every type the bridge serves has a set (empty if it has nothing,
		// answered so a proxy learns there are no listeners); a type it
		// does not serve has none and is never answered, as
		// go-control-plane's snapshot cache did. Answers are handed to
		// the stream under the cache's lock and never block (the stream
		// bounds its queue by holding back requests: outbox.go).
		var fan *fanout // catching up (fanout.go)
		if acks {
			fan = k.fan
		}
		if answer(k.sets[typ], fan) {
			return func() {}
		}
		seen = k.sets[typ].markOrNone()
	}
	return wait(k, seen)
}

func (w *sotwWatch) orderKey() uint64  { return w.order }
func (w *deltaWatch) orderKey() uint64 { return w.order }

// inOrder lists watches by their order (see sotwWatch).
func inOrder[W interface {
	comparable
	orderKey() uint64
}](watches map[W]struct{}) []W {
	ws := slices.Collect(maps.Keys(watches))
	slices.SortFunc(ws, func(a, b W) int { return cmp.Compare(a.orderKey(), b.orderKey()) })
	return ws
}

// addLocked files w among a key's watches of typ and returns its cancel.
func addLocked[W comparable](c *serveCache, watches map[string]map[W]struct{}, typ string, w W) func() {
	if watches[typ] == nil {
		watches[typ] = map[W]struct{}{}
	}
	watches[typ][w] = struct{}{}
	return func() {
		c.mu.Lock()
		delete(watches[typ], w)
		if len(watches[typ]) == 0 {
			delete(watches, typ) // a made-up type URL leaves nothing behind
		}
		c.mu.Unlock()
	}
}

// trimRequest is what a watch keeps of its request: the server reads the
// type back from the response, and the subscription already holds the
// names. An edge proxy's request names every cluster; keeping thousands of
// them per waiting stream would double its memory.
func trimRequest(r *cachev3.Request) *cachev3.Request {
	return &discoveryv3.DiscoveryRequest{Node: r.GetNode(), TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetResponseNonce()}
}

func trimDeltaRequest(r *cachev3.DeltaRequest) *cachev3.DeltaRequest {
	// A plain ACK holds nothing more than its trimmed copy would: kept
	// as it is, one allocation fewer per proxy per change. Each request
	// is a message of its own (gRPC's Recv allocates it), so nothing
	// changes it later.
	if len(r.GetResourceNamesSubscribe()) == 0 && len(r.GetResourceNamesUnsubscribe()) == 0 &&
		len(r.GetResourceLocatorsSubscribe()) == 0 && len(r.GetResourceLocatorsUnsubscribe()) == 0 &&
		len(r.GetInitialResourceVersions()) == 0 && r.GetErrorDetail() == nil && len(r.ProtoReflect().GetUnknown()) == 0 {
		return r
	}
	return &discoveryv3.DeltaDiscoveryRequest{Node: r.GetNode(), TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetResponseNonce()}
}

// Fetch is the REST transport, which the bridge does not serve.
func (c *serveCache) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("xds: REST fetch is not supported; use ADS or a gRPC xDS stream")
}

// sotwResponse is a SotW response built from shared entries; only the
// DiscoveryResponse envelope is its own (the server sets its nonce).
type sotwResponse struct {
	req      *cachev3.Request
	version  string
	typeURL  string
	entries  []*entry
	returned map[string]string
	shared   *sharedSotw // nil: encoded on its own
	fan      *fanout     // the update it answers; nil for a request's
}

var _ cachev3.Response = (*sotwResponse)(nil)

func (r *sotwResponse) GetDiscoveryResponse() (*discoveryv3.DiscoveryResponse, error) {
	if r.shared != nil {
		return r.shared.response(r.version, r.typeURL), nil
	}
	anys := make([]*anypb.Any, len(r.entries))
	for i, e := range r.entries {
		anys[i] = e.any
	}
	return &discoveryv3.DiscoveryResponse{VersionInfo: r.version, Resources: anys, TypeUrl: r.typeURL}, nil
}
func (r *sotwResponse) GetRequest() *discoveryv3.DiscoveryRequest { return r.req }

// names lists the resources r carries.
func (r *sotwResponse) names() []string {
	out := make([]string, len(r.entries))
	for i, e := range r.entries {
		out[i] = e.name
	}
	return out
}
func (r *sotwResponse) GetVersion() (string, error)             { return r.version, nil }
func (r *sotwResponse) GetResponseVersion() string              { return r.version }
func (r *sotwResponse) GetReturnedResources() map[string]string { return r.returned }
func (r *sotwResponse) GetContext() context.Context             { return context.Background() }

// deltaResponse is a delta response built from shared entries.
type deltaResponse struct {
	req      *cachev3.DeltaRequest
	version  string
	typeURL  string
	entries  []*entry
	removed  []string
	returned map[string]string
	shared   *sharedDelta // nil: encoded on its own
	fan      *fanout      // the update it answers; nil for a request's
}

var _ cachev3.DeltaResponse = (*deltaResponse)(nil)

func (r *deltaResponse) GetDeltaDiscoveryResponse() (*discoveryv3.DeltaDiscoveryResponse, error) {
	if r.shared != nil {
		return r.shared.response(r.version, r.typeURL, r.removed), nil
	}
	res := make([]*discoveryv3.Resource, len(r.entries))
	for i, e := range r.entries {
		res[i] = e.delta
	}
	return &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: r.version, Resources: res, RemovedResources: r.removed, TypeUrl: r.typeURL}, nil
}
func (r *deltaResponse) GetDeltaRequest() *discoveryv3.DeltaDiscoveryRequest { return r.req }
func (r *deltaResponse) GetSystemVersion() (string, error)                   { return r.version, nil }
func (r *deltaResponse) GetResponseVersion() string                          { return r.version }
func (r *deltaResponse) GetNextVersionMap() map[string]string                { return r.returned }
func (r *deltaResponse) GetReturnedResources() map[string]string             { return r.returned }
func (r *deltaResponse) GetContext() context.Context                         { return context.Background() }
