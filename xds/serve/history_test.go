package serve

import (
	"testing"
	"unsafe"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestEventRingKeepsEveryField: what a ring gives back is what was
// recorded, a NACK's text and a type without a short name included, and
// an event that replaces one in its slot leaves nothing of the old one's
// rare fields.
func TestEventRingKeepsEveryField(t *testing.T) {
	r := &eventRing{}
	key := streamKey{delta: true, id: 7}
	r.put(event{at: 1, stream: key, kind: eventPush, typ: resourcev3.EndpointType, version: "v1", resources: 3})
	if r.rare != nil {
		t.Error("an ordinary event allocated the rare fields")
	}
	r.put(event{at: 2, stream: key, kind: eventNACK, typ: resourcev3.EndpointType, version: "v0", err: "bad endpoint"})
	r.put(event{at: 3, stream: streamKey{id: 8}, kind: eventACK, typ: "type.example/Custom", version: "v9"})
	want := []HistoryEvent{
		{Stream: key.String(), Event: "push", Type: "EDS", Version: "v1", Resources: 3},
		{Stream: key.String(), Event: "nack", Type: "EDS", Version: "v0", Error: "bad endpoint"},
		{Stream: streamKey{id: 8}.String(), Event: "ack", Type: "type.example/Custom", Version: "v9"},
	}
	for i, w := range want {
		got := r.event(i)
		w.At = got.At
		if got != w || got.At.UnixNano() != int64(i+1) {
			t.Errorf("event %d: %+v, want %+v at %d", i, got, w, i+1)
		}
	}
	// Around the ring: the NACK's slot is taken by an ACK.
	for i := range historyLen - 1 { // slots 3 to 19, 0 and 1
		r.put(event{at: int64(10 + i), stream: key, kind: eventACK, typ: resourcev3.ClusterType, version: "v2"})
	}
	if got := r.event(1); got.Error != "" || got.Event != "ack" || got.Type != "CDS" {
		t.Errorf("the slot of a NACK, taken by an ACK: %+v", got)
	}
	if got := r.event(2); got.Type != "type.example/Custom" {
		t.Errorf("an event not yet replaced lost its type: %+v", got)
	}
}

// TestEventRingSize: a connected proxy's history stays under 1 KiB (the
// allocations' size classes; it was 1.75 KiB), and one that has only
// connected (eight events over ADS) holds a third of that.
func TestEventRingSize(t *testing.T) {
	if n := unsafe.Sizeof(eventRing{}) + historyLen*unsafe.Sizeof(slot{}); n > 896 {
		t.Errorf("a full ring is %d bytes, want at most 896", n)
	}
	if n := unsafe.Sizeof(eventRing{}) + historyFirst*unsafe.Sizeof(slot{}); n > 368 {
		t.Errorf("a connected proxy's ring is %d bytes, want at most 368", n)
	}
}

// TestEventRingAllocatesItsRoomOnce: a ring's first events allocate its
// first room only, and a full ring records without allocating.
func TestEventRingAllocatesItsRoomOnce(t *testing.T) {
	ev := event{at: 1, stream: streamKey{id: 1}, kind: eventPush, typ: resourcev3.ClusterType, version: "v"}
	if n := testing.AllocsPerRun(50, func() {
		r := &eventRing{}
		for range historyFirst {
			r.put(ev)
		}
	}); n != 1 { // the first room (the ring itself stays on the stack here)
		t.Errorf("a ring's first %d events took %v allocations, want 1", historyFirst, n)
	}
	r := &eventRing{}
	for range historyLen {
		r.put(ev)
	}
	if n := testing.AllocsPerRun(50, func() { r.put(ev) }); n != 0 {
		t.Errorf("an event in a full ring took %v allocations, want 0", n)
	}
}

// TestEventRingGrowsThenWraps: the ring takes room as events come
// (historyFirst slots, then historyLen) and, full, replaces its oldest;
// newest first, nothing is lost or reordered across the growth.
func TestEventRingGrowsThenWraps(t *testing.T) {
	r := &eventRing{}
	for k := 1; k <= 2*historyLen+3; k++ {
		r.put(event{at: int64(k), stream: streamKey{id: 1}, kind: eventPush, typ: resourcev3.ClusterType, version: "v"})
		wantCap := historyLen
		if k <= historyFirst {
			wantCap = historyFirst
		}
		if len(r.slots) != min(k, historyLen) || cap(r.slots) != wantCap {
			t.Fatalf("after %d events: %d held in room for %d, want %d in %d", k, len(r.slots), cap(r.slots), min(k, historyLen), wantCap)
		}
		for i := 1; i <= len(r.slots); i++ { // as Server.History reads it
			if got := r.event((r.next - i + historyLen) % historyLen).At.UnixNano(); got != int64(k-i+1) {
				t.Fatalf("after %d events, the %dth newest is event %d, want %d", k, i, got, k-i+1)
			}
		}
	}
}
