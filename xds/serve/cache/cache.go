package cache

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// keyState is the one record of a snapshot key (a node.cluster, marked
// for proxyless clients): what it is served, the streams that announced it
// and the watches open on it. sets is nil until the key is first set:
// requests wait until then. The versions a key is served are its sets'.
type keyState struct {
	sets map[string]*Set
	// streams counts the streams whose node announced the key (from their
	// first request); the key is dropped with the last (leave).
	streams int
	sotw    map[string]map[*SotwWatch]struct{}  // type URL ->
	delta   map[string]map[*DeltaWatch]struct{} // type URL ->
	// fan is the fan-out of the latest update that answered a watch.
	fan *fanout
}

// asked is what a watch, and the answers it gets, keep of the request
// that filed it: the stream's node (which the stream holds anyway) and
// whether it was the type's first request on the stream. Not the request
// itself: every stream of a fleet waits on each of its types, and the
// last request of each (an ACK with its nonce, ~200 bytes) was ~0.8 KiB
// a proxy (S3, N = 10,000, bench/README.md); an edge proxy's request
// names every cluster.
type asked struct {
	node  *corev3.Node
	first bool // no response nonce
}

func askedBy(node *corev3.Node, nonce string) asked { return asked{node: node, first: nonce == ""} }

// Cache is the cache the xDS servers watch (see the package doc).
type Cache struct {
	mu   sync.Mutex
	keys map[string]*keyState
	cfg  Config
	// gen counts changes to which load assignments streams are served:
	// a key's first stream or its last, or its EDS names changed
	// (Generation).
	gen uint64
}

var _ cachev3.Cache = (*Cache)(nil)

// Config is what a Cache tells its owner (see the package doc's lock
// order for what each may do).
type Config struct {
	// Watched, if set, is told of every watch before it opens, under no
	// lock (the server logs what a node asks for and is not served).
	// namesChanged is false for a request that only acknowledges (its
	// subscription is what was checked before): the names are not walked
	// again once per proxy per push.
	Watched func(node *corev3.Node, typeURL string, sub cachev3.Subscription, namesChanged bool)
	// Fanned, if set, is told each update's fan-out time (fanout.go),
	// by whichever goroutine hands over an update's last answer: possibly
	// Set's, under the cache's lock, so it must not block.
	Fanned func(time.Duration)
	// FanStarted, if set, is told when an update's fan-out begins (it
	// answered someone), under the cache's lock; Fanned follows once.
	FanStarted func()
}

// New returns a cache holding the shared key "" (nodes that announce no
// node.cluster), which is never dropped.
func New(cfg Config) *Cache {
	c := &Cache{keys: map[string]*keyState{}, cfg: cfg}
	c.keyLocked("")
	return c
}

// TypeOrder is the order one update is answered in on an ADS stream:
// clusters before their endpoints, listeners before their routes (Envoy's
// make-before-break order), secrets last (they only replace certificates
// of resources that already name them).
var TypeOrder = []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType, resourcev3.SecretType}

func (c *Cache) keyLocked(key string) *keyState {
	k := c.keys[key]
	if k == nil {
		k = &keyState{sotw: map[string]map[*SotwWatch]struct{}{}, delta: map[string]map[*DeltaWatch]struct{}{}}
		c.keys[key] = k
	}
	return k
}

// Set serves sets under an existing key (one that a stream joined, or
// the shared key), answers the watches that now have something to
// receive, and returns the type URLs whose set changed.
func (c *Cache) Set(key string, sets map[string]*Set) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.keys[key]
	if k == nil {
		return nil // its last stream left while the update was building
	}
	old := k.sets
	k.sets = sets
	if old == nil || namesDiffer(old[resourcev3.EndpointType], sets[resourcev3.EndpointType]) {
		c.gen++ // not for an endpoint change: a flip leaves the names alone
	}
	var fan *fanout
	if c.cfg.Fanned != nil {
		fan = newFanout(c.cfg.Fanned)
	}
	answered := false
	var changed []string
	for _, typ := range TypeOrder {
		ts := sets[typ]
		if old != nil && old[typ] == ts {
			continue
		}
		if old == nil || old[typ].version != ts.version {
			changed = append(changed, typ)
		}
		for _, w := range inOrder(k.sotw[typ]) {
			if resp := sotwAnswer(w.asked, w.sub, ts, w.seen, w.own); resp != nil {
				delete(k.sotw[typ], w)
				w.filed.in = nil
				answered = fan.attach(resp, false) || answered
				w.take(resp)
				continue
			}
			w.seen = ts.mark
		}
		for _, w := range inOrder(k.delta[typ]) {
			if resp := deltaAnswer(w.asked, w.sub, ts, w.seen, w.own); resp != nil {
				delete(k.delta[typ], w)
				w.filed.in = nil
				answered = fan.attach(resp, false) || answered
				w.take(resp)
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
		if c.cfg.FanStarted != nil {
			c.cfg.FanStarted()
		}
		fan.handed() // the cache's own count: answering is over
	}
	return changed
}

// Keys lists every key, sorted.
func (c *Cache) Keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.keys))
}

// Join counts a stream that announced key and reports whether the key
// still needs its sets.
func (c *Cache) Join(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.keyLocked(key)
	if k.streams++; k.streams == 1 {
		c.gen++
	}
	return k.sets == nil
}

// Leave uncounts a stream of key and drops the key with its last stream,
// reporting whether it did
// (watches are cancelled before the stream's close is reported). The
// shared key stays. Counting and dropping under one lock means a stream
// announcing the key again never finds it half forgotten.
func (c *Cache) Leave(key string) (dropped bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.keys[key]
	if k == nil {
		return false
	}
	if k.streams--; k.streams > 0 {
		return false
	}
	c.gen++ // its last stream
	if key == "" {
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

// Generation changes whenever ServedToStreams(EDS) may have: a key gets
// its first stream or loses its last, or the names of its load
// assignments change.
func (c *Cache) Generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// namesDiffer reports whether a and b (nil: none) hold different names.
func namesDiffer(a, b *Set) bool {
	switch {
	case a == b:
		return false
	case a == nil || b == nil:
		return true
	}
	return len(a.entries) != len(b.entries) || Adds(a, b)
}

// ServedToStreams lists, sorted, the names of the typeURL resources
// served to the keys some stream announced.
func (c *Cache) ServedToStreams(typeURL string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := map[string]bool{}
	for _, k := range c.keys {
		if k.streams == 0 || k.sets == nil || k.sets[typeURL] == nil {
			continue
		}
		for _, e := range k.sets[typeURL].Entries() {
			names[e.Name()] = true
		}
	}
	return slices.Sorted(maps.Keys(names))
}

// Served returns what key is served, nil if it was never set.
func (c *Cache) Served(key string) map[string]*Set {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := c.keys[key]; k != nil {
		return k.sets
	}
	return nil
}

// Waiting counts the watches open on key (a stream waiting for its
// next answer has one per type).
func (c *Cache) Waiting(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	if k := c.keys[key]; k != nil {
		for _, ws := range k.sotw {
			n += len(ws)
		}
		for _, ws := range k.delta {
			n += len(ws)
		}
	}
	return n
}

// Filed names one stream's waiting watch of a type (UpToDate).
type Filed struct {
	Order uint64 // the stream's order (its id)
	Delta bool
	Type  string
}

// UpToDate lists the watches filed on key that were found, against the
// set key is served now, to lack nothing: their streams hold all of that
// type they want. A stream's version of a type alone cannot say so: a
// delta stream (or a SotW stream of endpoints, routes or secrets) that
// wants none of what changed is sent nothing, so it keeps the version it
// was last sent, and one that subscribed only to names the set lacks was
// never sent any (serve's staging waits on this).
func (c *Cache) UpToDate(key string) map[Filed]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.keys[key]
	if k == nil || k.sets == nil {
		return nil
	}
	out := map[Filed]bool{}
	for typ, ws := range k.sotw {
		for w := range ws {
			if ts := k.sets[typ]; ts != nil && w.seen == ts.mark {
				out[Filed{Order: w.order, Type: typ}] = true
			}
		}
	}
	for typ, ws := range k.delta {
		for w := range ws {
			if ts := k.sets[typ]; ts != nil && w.seen == ts.mark {
				out[Filed{Order: w.order, Delta: true, Type: typ}] = true
			}
		}
	}
	return out
}

// open answers a new watch at once if its key is served and answer finds
// something to send; otherwise wait files it (with the set it is up to
// date with, nil before the key is first set).
//
// answer is also given, when the request only acknowledges (acks: it
// holds what it was sent), the key's latest update's fan-out (else nil):
// an answer to a stream that had no watch filed when the update was
// served (its proxy was still acknowledging the one before) belongs to
// that update's fan-out while it is still open (fanout.attach).
func (c *Cache) open(node *corev3.Node, typ string, acks bool, answer func(*Set, *fanout) bool, wait func(k *keyState, seen string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.keyLocked(Key(node))
	var seen string
	if k.sets != nil {
		// Every type the bridge serves has a set (empty if it has nothing,
		// answered so a proxy learns there are no listeners); a type it
		// does not serve has none and is never answered, as
		// go-control-plane's snapshot cache did. Answers are handed to
		// the stream under the cache's lock and never block (the stream
		// bounds its queue by holding back requests: serve's outbox.go).
		var fan *fanout // catching up (fanout.go)
		if acks {
			fan = k.fan
		}
		if answer(k.sets[typ], fan) {
			return
		}
		seen = k.sets[typ].markOrNone()
	}
	wait(k, seen)
}

func (w *SotwWatch) orderKey() uint64  { return w.order }
func (w *DeltaWatch) orderKey() uint64 { return w.order }

// inOrder lists watches by their order (see SotwWatch).
func inOrder[W interface {
	comparable
	orderKey() uint64
}](watches map[W]struct{}) []W {
	ws := slices.Collect(maps.Keys(watches))
	slices.SortFunc(ws, func(a, b W) int { return cmp.Compare(a.orderKey(), b.orderKey()) })
	return ws
}

// Fetch is the REST transport, which the bridge does not serve.
func (c *Cache) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("xds: REST fetch is not supported; use ADS or a gRPC xDS stream")
}

// SotwResponse is a SotW response built from shared entries; only the
// DiscoveryResponse envelope is its own (the server sets its nonce).
type SotwResponse struct {
	asked asked
	// set is the set answered, for its version and type URL: a pointer,
	// not two strings, keeps the answer made for every proxy a change
	// reaches in 80 bytes, out of the 96-byte size class where each
	// connection keeps gRPC state, spans that the answers of a connect
	// left half-empty (bench/README.md, "Where a storm's memory stays").
	set      *Set
	entries  []*Entry
	returned map[string]string
	shared   *sharedSotw // nil: encoded on its own
	fan      *fanout     // the update it answers; nil for a request's
}

var _ cachev3.Response = (*SotwResponse)(nil)

func (r *SotwResponse) GetDiscoveryResponse() (*discoveryv3.DiscoveryResponse, error) {
	out := &discoveryv3.DiscoveryResponse{}
	r.Fill(out)
	return out, nil
}

// Fill makes out, an empty message, the response GetDiscoveryResponse
// returns: the servers send each push from a message they reuse, where a
// message per push to every proxy was garbage among what the streams keep
// (bench/README.md, "Where a storm's memory stays").
func (r *SotwResponse) Fill(out *discoveryv3.DiscoveryResponse) {
	if r.shared != nil {
		r.shared.fill(r.set.version, r.set.typeURL, out)
		return
	}
	anys := make([]*anypb.Any, len(r.entries))
	for i, e := range r.entries {
		anys[i] = e.any
	}
	out.VersionInfo, out.Resources, out.TypeUrl = r.set.version, anys, r.set.typeURL
}

// GetRequest is a request with the node and type the response answers,
// made when asked: a response does not keep its request (asked). The
// bridge's servers never ask.
func (r *SotwResponse) GetRequest() *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{Node: r.asked.node, TypeUrl: r.set.typeURL}
}

// names lists the resources r carries.
func (r *SotwResponse) Names() []string {
	out := make([]string, len(r.entries))
	for i, e := range r.entries {
		out[i] = e.name
	}
	return out
}
func (r *SotwResponse) GetVersion() (string, error)             { return r.set.version, nil }
func (r *SotwResponse) GetResponseVersion() string              { return r.set.version }
func (r *SotwResponse) GetReturnedResources() map[string]string { return r.returned }
func (r *SotwResponse) GetContext() context.Context             { return context.Background() }

// DeltaResponse is a delta response built from shared entries.
type DeltaResponse struct {
	asked    asked
	version  string
	typeURL  string
	entries  []*Entry
	removed  []string
	returned map[string]string
	shared   *sharedDelta // nil: encoded on its own
	fan      *fanout      // the update it answers; nil for a request's
}

var _ cachev3.DeltaResponse = (*DeltaResponse)(nil)

func (r *DeltaResponse) GetDeltaDiscoveryResponse() (*discoveryv3.DeltaDiscoveryResponse, error) {
	out := &discoveryv3.DeltaDiscoveryResponse{}
	r.Fill(out)
	return out, nil
}

// Fill is SotwResponse.Fill for delta.
func (r *DeltaResponse) Fill(out *discoveryv3.DeltaDiscoveryResponse) {
	if r.shared != nil {
		r.shared.fill(r.version, r.typeURL, r.removed, out)
		return
	}
	res := make([]*discoveryv3.Resource, len(r.entries))
	for i, e := range r.entries {
		res[i] = e.delta
	}
	out.SystemVersionInfo, out.Resources, out.RemovedResources, out.TypeUrl = r.version, res, r.removed, r.typeURL
}

// GetDeltaRequest is as SotwResponse.GetRequest.
func (r *DeltaResponse) GetDeltaRequest() *discoveryv3.DeltaDiscoveryRequest {
	return &discoveryv3.DeltaDiscoveryRequest{Node: r.asked.node, TypeUrl: r.typeURL}
}
func (r *DeltaResponse) GetSystemVersion() (string, error)       { return r.version, nil }
func (r *DeltaResponse) GetResponseVersion() string              { return r.version }
func (r *DeltaResponse) GetNextVersionMap() map[string]string    { return r.returned }
func (r *DeltaResponse) GetReturnedResources() map[string]string { return r.returned }
func (r *DeltaResponse) GetContext() context.Context             { return context.Background() }

// Entries lists the resources r carries, shared with the cache (not to be
// modified).
func (r *SotwResponse) Entries() []*Entry { return r.entries }

// Entries lists the resources r carries, shared with the cache (not to be
// modified).
func (r *DeltaResponse) Entries() []*Entry { return r.entries }
