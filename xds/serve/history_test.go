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
// allocation's size class); it was 1.75 KiB.
func TestEventRingSize(t *testing.T) {
	if n := unsafe.Sizeof(eventRing{}); n > 896 {
		t.Errorf("eventRing is %d bytes, want at most 896", n)
	}
}
