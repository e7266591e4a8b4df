package serve

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// heldStream is a stream of the bridge's delta server driven through its
// request handling, its answers taken off its queue as sending would.
type heldStream struct {
	t     *testing.T
	st    *deltaStream
	node  *corev3.Node
	nonce int
}

func newHeldStream(t *testing.T, s *testServer, id int64) *heldStream {
	t.Helper()
	srv := newDeltaServer(context.Background(), s.cache, s.cb)
	st := &deltaStream{d: srv, typeURL: resourcev3.AnyType}
	st.init(id)
	if err := s.cb.OnDeltaStreamOpen(context.Background(), st.id, resourcev3.AnyType); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.close() })
	return &heldStream{t: t, st: st, node: &corev3.Node{Id: "held", Cluster: "edge"}}
}

func (h *heldStream) request(req *discoveryv3.DeltaDiscoveryRequest) {
	h.t.Helper()
	req.Node, req.TypeUrl = h.node, resourcev3.EndpointType
	if h.nonce > 0 {
		req.ResponseNonce = strconv.Itoa(h.nonce)
	}
	if err := h.st.actOn(req); err != nil {
		h.t.Fatal(err)
	}
}

// taken empties the queue and returns the names sent and removed.
func (h *heldStream) taken() (sent, removed []string) {
	h.st.out.mu.Lock()
	defer h.st.out.mu.Unlock()
	for _, r := range h.st.out.pending {
		resp, err := r.GetDeltaDiscoveryResponse()
		if err != nil {
			h.t.Fatal(err)
		}
		for _, res := range resp.GetResources() {
			sent = append(sent, res.GetName())
		}
		removed = append(removed, resp.GetRemovedResources()...)
		h.nonce++
	}
	h.st.out.pending = nil
	return sent, removed
}

func (h *heldStream) held() map[string]string {
	w, _ := h.st.watchFor(resourcev3.EndpointType, nil)
	return w.subscription().ReturnedResources()
}

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func names(m map[string]string) []string {
	return slices.Sorted(maps.Keys(maps.Collect(func(yield func(string, string) bool) {
		for k, v := range m {
			if !cache.Marked(k) && !yield(k, v) {
				return
			}
		}
	})))
}

// TestStreamsShareWhatTheyHold: streams following the same names hold one
// map of versions, from the first answer and after every update, and a
// stream that edits what it holds (unsubscribing) gets its own copy first:
// the others still hold, and are told of the removal of, what it dropped.
// A stream reconnecting with the versions it holds shares again after its
// next answer.
func TestStreamsShareWhatTheyHold(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api", "web", "db"}, 8080))
	a, b := newHeldStream(t, s, 1<<40), newHeldStream(t, s, 1<<40+1)
	for _, h := range []*heldStream{a, b} {
		h.request(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"api", "web", "db"}})
		if sent, _ := h.taken(); len(sent) != 3 {
			t.Fatalf("first answer sent %v", sent)
		}
		h.request(&discoveryv3.DeltaDiscoveryRequest{}) // ACK
	}
	if !sameMap(a.held(), b.held()) {
		t.Fatal("two streams following the same names hold two maps after their first answers")
	}
	first := a.held()

	s.update(t, withEndpointPort(testOutput(t, []string{"api", "web", "db"}, 8080), 0, 9100))
	for _, h := range []*heldStream{a, b} {
		if sent, _ := h.taken(); !slices.Equal(sent, []string{"api"}) {
			t.Fatalf("update sent %v, want api", sent)
		}
	}
	b.request(&discoveryv3.DeltaDiscoveryRequest{})
	if !sameMap(a.held(), b.held()) || sameMap(a.held(), first) {
		t.Fatal("after an update the streams do not share one new map")
	}
	if first["api"] == a.held()["api"] {
		t.Fatal("the map held before the update was written")
	}

	a.request(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesUnsubscribe: []string{"web"}})
	if got := names(b.held()); !slices.Equal(got, []string{"api", "db", "web"}) {
		t.Fatalf("another stream's unsubscribing changed what b holds: %v", got)
	}
	if got := names(a.held()); !slices.Equal(got, []string{"api", "db"}) {
		t.Fatalf("a holds %v after unsubscribing web", got)
	}

	s.update(t, withEndpointPort(testOutput(t, []string{"api", "db"}, 8080), 0, 9100))
	// (db moves to web's port: both get it.)
	if sent, removed := b.taken(); !slices.Equal(sent, []string{"db"}) || !slices.Equal(removed, []string{"web"}) {
		t.Fatalf("web's removal: b got %v removed %v, want db, and web removed", sent, removed)
	}
	if sent, removed := a.taken(); !slices.Equal(sent, []string{"db"}) || len(removed) != 0 {
		t.Fatalf("web's removal: a (unsubscribed) got %v removed %v, want db only", sent, removed)
	}
	b.request(&discoveryv3.DeltaDiscoveryRequest{})

	// A reconnect with what b holds: nothing to send, then shared again
	// from the next update on.
	initial := maps.Clone(b.held())
	maps.DeleteFunc(initial, func(k, _ string) bool { return cache.Marked(k) })
	c := newHeldStream(t, s, 1<<40+2)
	c.request(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"api", "db"}, InitialResourceVersions: initial})
	if sent, removed := c.taken(); len(sent)+len(removed) != 0 {
		t.Fatalf("reconnect holding everything: sent %v removed %v", sent, removed)
	}
	s.update(t, withEndpointPort(withEndpointPort(testOutput(t, []string{"api", "db"}, 8080), 0, 9100), 1, 9201))
	if sent, _ := b.taken(); !slices.Equal(sent, []string{"db"}) {
		t.Fatalf("update sent b %v, want db", sent)
	}
	if sent, _ := c.taken(); !slices.Equal(sent, []string{"db"}) {
		t.Fatalf("after reconnect, update sent %v, want db", sent)
	}
	if !sameMap(b.held(), c.held()) {
		t.Fatal("a stream that reconnected with its versions does not share after its next answer")
	}
}

// TestHeldMapsAreBounded: past cache.MaxHeldMaps distinct maps a set memoises
// no more, and answers are still right.
func TestHeldMapsAreBounded(t *testing.T) {
	s := startServer(t, ServerConfig{})
	clusters := make([]string, cache.MaxHeldMaps+20)
	for i := range clusters {
		clusters[i] = "c" + strconv.Itoa(i)
	}
	s.update(t, testOutput(t, clusters, 8080))
	var hs []*heldStream
	for i, name := range clusters {
		h := newHeldStream(t, s, 1<<40+int64(i))
		h.request(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{name}})
		if sent, _ := h.taken(); !slices.Equal(sent, []string{name}) {
			t.Fatalf("stream %d sent %v", i, sent)
		}
		if got := names(h.held()); !slices.Equal(got, []string{name}) {
			t.Fatalf("stream %d holds %v", i, got)
		}
		hs = append(hs, h)
	}
	// (The set's own memo stays within the bound too: the cache's
	// TestHeldMemoIsBounded.)
	shared := 0
	for _, h := range hs {
		if cache.IsShared(h.held()) {
			shared++
		}
	}
	if shared != cache.MaxHeldMaps {
		t.Fatalf("%d streams share their map, want %d (the bound)", shared, cache.MaxHeldMaps)
	}
}

// TestSotwStreamsShareWhatTheyHold: as TestStreamsShareWhatTheyHold for
// the SotW server: endpoints (only what changed) and clusters (full
// state) are held in one map per set of names, and a stream that asks
// for fewer names copies its map before dropping the others.
func TestSotwStreamsShareWhatTheyHold(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api", "web"}, 8080))
	srv := newSotwServer(context.Background(), s.cache, s.cb)
	node := &corev3.Node{Id: "held-sotw", Cluster: "edge"}
	var streams []*sotwStream
	for i := range 2 {
		st := &sotwStream{s: srv, typeURL: resourcev3.AnyType}
		st.init(1<<40 + int64(i))
		if err := s.cb.OnStreamOpen(context.Background(), st.id, resourcev3.AnyType); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.close() })
		for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType} {
			var names []string
			if typ == resourcev3.EndpointType {
				names = []string{"api", "web"}
			}
			if err := st.actOn(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ, ResourceNames: names}); err != nil {
				t.Fatal(err)
			}
		}
		st.out.mu.Lock()
		if len(st.out.pending) != 2 {
			t.Fatalf("stream %d: %d answers, want clusters and endpoints", i, len(st.out.pending))
		}
		st.out.pending = nil
		st.out.mu.Unlock()
		streams = append(streams, st)
	}
	held := func(st *sotwStream, typ string) map[string]string {
		w, old := st.watchFor(typ, nil)
		if !old {
			t.Fatalf("no watch of %s", typ)
		}
		return w.subscription().ReturnedResources()
	}
	a, b := streams[0], streams[1]
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType} {
		if !sameMap(held(a, typ), held(b, typ)) {
			t.Fatalf("%s: two SotW streams following the same names hold two maps", typ)
		}
	}
	if err := a.actOn(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"api"}}); err != nil {
		t.Fatal(err)
	}
	if got := names(held(b, resourcev3.EndpointType)); !slices.Equal(got, []string{"api", "web"}) {
		t.Fatalf("another stream asking for fewer names changed what b holds: %v", got)
	}
	if got := names(held(a, resourcev3.EndpointType)); !slices.Equal(got, []string{"api"}) {
		t.Fatalf("a holds %v after asking for api only", got)
	}
}

// TestOtherCallersNeverHoldSharedMaps: watches filed through
// go-control-plane's cache interface (whose servers edit the map they are
// given) get maps of their own.
func TestOtherCallersNeverHoldSharedMaps(t *testing.T) {
	s := newCacheServer(t, testOutput(t, []string{"api", "web"}, 8080))
	for _, cl := range []*cacheClient{
		newDeltaClient(t, s.cache, "edge", resourcev3.EndpointType, []string{"api", "web"}),
		newDeltaClient(t, s.cache, "edge", resourcev3.EndpointType, []string{"api", "web"}),
		newSotwClient(t, s.cache, "edge", resourcev3.EndpointType, []string{"api", "web"}),
		newSotwClient(t, s.cache, "edge", resourcev3.ClusterType, nil),
	} {
		cl.mustTake("first")
		if held := cl.sub.ReturnedResources(); cache.IsShared(held) || len(names(held)) != 2 {
			t.Fatalf("%s watch through the cache interface holds %v", cl.typ, held)
		}
	}
}

// TestForgedMarksDoNotReachWhatStreamsHold: a client cannot plant the
// bridge's marks among what its stream holds (unsubscribing a wildcard
// stream's name, which go-control-plane records as held at version "",
// or in the versions it says it holds): a planted cache.SharedMark made its map
// the memoised successor of "held nothing", so other streams were told
// they held what they were never sent.
func TestForgedMarksDoNotReachWhatStreamsHold(t *testing.T) {
	for _, mark := range []string{cache.SharedMark, cache.SetMark, "\x00other", "a\x00b"} {
		s := startServer(t, ServerConfig{})
		s.update(t, testOutput(t, []string{"api", "web", "db"}, 8080))
		p := newHeldStream(t, s, 1<<40+5)
		p.request(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"api", "web"}})
		p.taken()
		attacker := newHeldStream(t, s, 1<<40)
		attacker.request(&discoveryv3.DeltaDiscoveryRequest{
			ResourceNamesSubscribe:   []string{"*", mark},
			ResourceNamesUnsubscribe: []string{mark},
			InitialResourceVersions:  map[string]string{"api": p.held()["api"], "web": p.held()["web"], mark: "x"},
		})
		attacker.taken()
		for name, v := range attacker.held() {
			if !cache.ClientName(name) && (v == "" || v == "x") {
				t.Fatalf("%q: the client planted %q among what its stream holds: %v", mark, name, attacker.held())
			}
		}
		b := newHeldStream(t, s, 1<<40+1)
		b.request(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"db"}})
		b.taken()
		if got := names(b.held()); !slices.Equal(got, []string{"db"}) {
			t.Fatalf("%q: b subscribed to db holds %v", mark, got)
		}
		b.request(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"api"}})
		if sent, _ := b.taken(); !slices.Equal(sent, []string{"api"}) {
			t.Fatalf("%q: b subscribed to api but was sent %v", mark, sent)
		}
	}
}

// TestUnsubscribedCopyIsNotShared: the copy a stream makes before
// unsubscribing is its own, not a shared map others could be handed.
func TestUnsubscribedCopyIsNotShared(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api", "web", "db"}, 8080))
	b, a := newHeldStream(t, s, 1<<40), newHeldStream(t, s, 1<<40+1) // b answered first
	for _, h := range []*heldStream{a, b} {
		h.request(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"api", "web", "db"}})
		h.taken()
		h.request(&discoveryv3.DeltaDiscoveryRequest{})
	}
	a.request(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesUnsubscribe: []string{"web"}})
	if cache.IsShared(a.held()) {
		t.Fatal("the copy made before unsubscribing is cache.Marked shared")
	}
	s.update(t, withEndpointPort(testOutput(t, []string{"api", "web", "db"}, 8080), 0, 9100))
	b.taken()
	a.taken()
	if got := names(a.held()); !slices.Equal(got, []string{"api", "db"}) {
		t.Fatalf("a holds %v after unsubscribing web and an api update", got)
	}
	if got := names(b.held()); !slices.Equal(got, []string{"api", "db", "web"}) {
		t.Fatalf("b holds %v after an api update", got)
	}
}

// TestRemovedNamesAreInTheHeldKey: two streams sharing a map, one told of
// a removal the other is not (it does not follow that name), do not get
// each other's successor.
func TestRemovedNamesAreInTheHeldKey(t *testing.T) {
	s := startServer(t, ServerConfig{})
	all := testOutput(t, []string{"api", "web", "db"}, 8080)
	s.update(t, all)
	a := newHeldStream(t, s, 1<<40+1)
	a.request(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"api", "web", "db"}})
	a.taken()
	a.request(&discoveryv3.DeltaDiscoveryRequest{})
	initial := maps.Clone(a.held())
	maps.DeleteFunc(initial, func(k, _ string) bool { return cache.Marked(k) })
	// b follows api and db but says it holds web too.
	b := newHeldStream(t, s, 1<<40)
	b.request(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"api", "db"}, InitialResourceVersions: initial})
	b.taken()
	s.update(t, withEndpointPort(all, 2, 9300))
	a.taken()
	b.taken()
	a.request(&discoveryv3.DeltaDiscoveryRequest{})
	b.request(&discoveryv3.DeltaDiscoveryRequest{})
	if !sameMap(a.held(), b.held()) {
		t.Fatal("precondition: a and b share what they hold")
	}
	s.update(t, withEndpointPort(withEndpointPort(testOutput(t, []string{"api", "db"}, 8080), 0, 9100), 1, 9300)) // web gone, api changed
	b.taken()
	if _, removed := a.taken(); !slices.Equal(removed, []string{"web"}) {
		t.Fatalf("a was told of removals %v, want web", removed)
	}
	if got := names(a.held()); slices.Contains(got, "web") {
		t.Fatalf("a was told web is removed but holds %v", got)
	}
	if got := names(b.held()); !slices.Contains(got, "web") {
		t.Fatalf("b was not told web is removed but no longer holds it: %v", got)
	}
}

// TestOtherCallersAfterBridgeStreams: a watch through go-control-plane's
// cache interface asking for names the bridge's streams share a map for
// still gets a map of its own.
func TestOtherCallersAfterBridgeStreams(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api", "web"}, 8080))
	h := newHeldStream(t, s, 1<<40)
	h.request(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"api", "web"}})
	h.taken()
	if !cache.IsShared(h.held()) {
		t.Fatal("precondition: the bridge's stream shares what it holds")
	}
	cl := newDeltaClient(t, s.cache, "edge", resourcev3.EndpointType, []string{"api", "web"})
	cl.mustTake("first")
	if held := cl.sub.ReturnedResources(); cache.IsShared(held) || sameMap(held, h.held()) {
		t.Fatalf("a cache-interface watch was handed the shared map %v", held)
	}
}
