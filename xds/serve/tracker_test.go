package serve

import (
	"strings"
	"testing"
	"time"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestPerTypeStateIsKeyedByTheSharedTypeURL: a stream's per-type state
// (the tracker's and the stream's watches, through typeFor) is keyed by
// the type URL constant, not by the copy decoded from the stream's first
// request of the type, so the lookup on every push and ACK compares with
// bytes every stream shares. Other type URLs are kept as they came.
func TestPerTypeStateIsKeyedByTheSharedTypeURL(t *testing.T) {
	shared := func(s, constant string) bool { return unsafe.StringData(s) == unsafe.StringData(constant) }
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType, resourcev3.SecretType, resourcev3.RuntimeType} {
		decoded := strings.Clone(typ)
		got, err := typeFor(decoded, resourcev3.AnyType)
		if err != nil || got != typ || !shared(got, typ) {
			t.Errorf("typeFor(a decoded %s) = %q, %v; want the package's constant", shortType(typ), got, err)
		}
	}
	other := "type.googleapis.com/example.Other"
	if got := canonicalType(other); !shared(got, other) {
		t.Errorf("canonicalType(%q) = %q; want it as it came", other, got)
	}

	tr := newTracker()
	key := streamKey{delta: true, id: 1}
	tr.open(key, "", nil)
	decoded := strings.Clone(resourcev3.EndpointType)
	tr.request(time.Now(), key, &corev3.Node{Id: "n", Cluster: "c"}, decoded, "", "", "", nameUpdate{})
	tr.response(time.Now(), key, strings.Clone(resourcev3.ClusterType), "v1", "1", 0, nil)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	st := tr.streams[key]
	if len(st.types) != 2 {
		t.Fatalf("%d types tracked; want EDS and CDS", len(st.types))
	}
	for _, ts := range st.types {
		if k := ts.url; !shared(k, resourcev3.EndpointType) && !shared(k, resourcev3.ClusterType) {
			t.Errorf("type state keyed by a stream's own copy of %q", k)
		}
	}
}

// TestStreamTypesAllocateOnce: a stream's state for the four types an
// Envoy asks for over ADS is one allocation, not a map and a state per
// type (~1 KiB of every proxy's heap before; bench/README.md).
func TestStreamTypesAllocateOnce(t *testing.T) {
	tr := newTracker()
	node := &corev3.Node{Id: "n", Cluster: "c"}
	tr.open(streamKey{delta: true, id: 1}, "", nil)
	key := streamKey{delta: true, id: 1}
	types := []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType}
	now := time.Now()
	allocs := testing.AllocsPerRun(100, func() {
		tr.mu.Lock()
		tr.streams[key].types = nil
		tr.mu.Unlock()
		for _, typ := range types {
			tr.request(now, key, node, typ, "", "", "", nameUpdate{})
		}
	})
	if allocs > 1 {
		t.Errorf("four types' state took %v allocations; want 1", allocs)
	}
}

// TestStreamWatchesAllocateOnce: likewise a stream's watches of its
// four types (a map of pointers before, ~0.3 KiB a proxy).
func TestStreamWatchesAllocateOnce(t *testing.T) {
	a := newADSStream[int](1)
	types := []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType}
	allocs := testing.AllocsPerRun(100, func() {
		a.watches = nil
		for _, typ := range types {
			a.watchFor(typ, func(*typeWatch) {})
		}
	})
	if allocs > 1 {
		t.Errorf("four types' watches took %v allocations; want 1", allocs)
	}
	for _, typ := range types {
		if w, old := a.watchFor(typ, nil); !old || w.typ != typ {
			t.Errorf("watch of %s not found again", typ)
		}
	}
}

// TestTypeStatesSize: a stream's four type states (ADS) stay one object of
// at most 512 bytes, under which a pointerful object has no malloc header
// (640 bytes' size class with one).
func TestTypeStatesSize(t *testing.T) {
	if n := 4 * unsafe.Sizeof(typeState{}); n > 512 {
		t.Errorf("four type states are %d bytes, want at most 512", n)
	}
}

// TestStreamKinds: a stream's kind names its protocol and the type it was
// opened for, delta marked.
func TestStreamKinds(t *testing.T) {
	for _, c := range []struct {
		delta bool
		typ   string
		want  string
	}{{false, "", "ADS"}, {true, "", "ADS delta"}, {false, resourcev3.ClusterType, "CDS"}, {true, resourcev3.EndpointType, "EDS delta"}} {
		if got := streamKind(c.delta, c.typ); got != c.want {
			t.Errorf("streamKind(%v, %q) = %q, want %q", c.delta, c.typ, got, c.want)
		}
	}
}

// TestTrackerCountsStreamsPerNode: whether a closing stream was its
// node's last (its push history is then forgotten) is a count kept as
// streams learn their node and close, not a scan of every stream: that
// scan made a fleet's disconnect quadratic under the tracker's lock.
func TestTrackerCountsStreamsPerNode(t *testing.T) {
	tr := newTracker()
	keys := []streamKey{{id: 1}, {id: 2}, {id: 3}, {id: 4, delta: true}}
	for _, k := range keys {
		tr.open(k, "", nil)
	}
	node := &corev3.Node{Id: "a", Cluster: "c"}
	tr.request(time.Now(), keys[0], node, resourcev3.ClusterType, "", "", "", nameUpdate{})
	tr.request(time.Now(), keys[0], node, resourcev3.EndpointType, "", "", "", nameUpdate{}) // the same stream again
	tr.request(time.Now(), keys[1], &corev3.Node{Id: "a", Cluster: "c"}, resourcev3.ClusterType, "", "", "", nameUpdate{})
	tr.request(time.Now(), keys[3], &corev3.Node{Id: "b", Cluster: "c"}, resourcev3.ClusterType, "", "", "", nameUpdate{})
	// keys[2] never sends a node.
	if !tr.hasNode("a") || !tr.hasNode("b") || tr.hasNode("c") {
		t.Fatalf("after requests: a %v, b %v, c %v; want a and b only", tr.hasNode("a"), tr.hasNode("b"), tr.hasNode("c"))
	}
	tr.close(keys[0])
	if !tr.hasNode("a") {
		t.Error("a's other stream is open, but a counts as gone")
	}
	tr.close(keys[2]) // no node: nothing to count
	tr.close(keys[1])
	if tr.hasNode("a") {
		t.Error("a's last stream closed, but a still counts")
	}
	tr.dropNode(keys[3]) // refused before it joined
	if tr.hasNode("b") {
		t.Error("b's node was dropped, but b still counts")
	}
	tr.close(keys[3])
	if len(tr.nodes) != 0 {
		t.Errorf("all streams closed, the count holds %v", tr.nodes)
	}
}
