package serve

import (
	"sync"
	"time"
)

// History keeps, per connected node id, its last pushes, ACKs and NACKs
// (across its streams), for the console's proxy page: a status shows
// where a proxy is, the history how it got there. It is bounded: at most
// historyLen events per node and historyNACKText bytes of a NACK's text,
// under 1 KiB a proxy, and a node's history goes when its last stream
// does.
type history struct {
	mu    sync.Mutex
	nodes map[string]*eventRing
}

// eventRing holds a node's last historyLen events in place: recording
// one allocates nothing once the ring is full, which matters when a change
// is pushed to thousands of proxies at once (each push and ACK is an
// event). An event's type is a number and what is rare (a NACK's text, a
// type without a short name) lives apart, allocated only for a proxy that
// has some.
//
// The ring takes room as it fills: historyFirst slots (320 bytes), then
// historyLen (~0.9 KiB). A proxy that has only connected holds its
// connect's pushes and ACKs (eight over ADS), and most of a large fleet's
// proxies are pushed to rarely: every proxy's full ring was a tenth of the
// bridge's own memory per proxy at N = 10,000 (bench/README.md).
type eventRing struct {
	slots []slot // len: events held; cap grows to historyLen
	next  int    // where the next event goes (len(slots) until full)
	rare  *[historyLen]rareFields
}

const (
	historyLen      = 20
	historyFirst    = 8
	historyNACKText = 512
)

// HistoryEvent is one push, ACK or NACK on one of a node's streams.
type HistoryEvent struct {
	At     time.Time `json:"at"`
	Stream string    `json:"stream"`
	// Event is "push", "ack" or "nack".
	Event   string `json:"event"`
	Type    string `json:"type"` // CDS, EDS, ...
	Version string `json:"version"`
	// Resources is the number of resources a push carried.
	Resources int `json:"resources,omitempty"`
	// Error is a NACK's text, cut at 512 bytes.
	Error string `json:"error,omitempty"`
}

// event is what the callbacks record: a HistoryEvent with the stream's
// key rather than its name, the kind as a number.
type event struct {
	at        int64  // Unix nanoseconds
	typ       string // the type URL
	version   string
	err       string
	stream    streamKey
	resources int32
	kind      eventKind
}

// slot is an event as a ring holds it: 40 bytes, up to 20 per connected
// proxy.
type slot struct {
	at        int64
	version   string
	id        int64 // the stream's key
	resources int32
	kind      eventKind
	typ       uint8 // shortTypeURLs[typ-1]; 0: rareFields.typ (a type URL)
	delta     bool
}

// rareFields is what few events have.
type rareFields struct{ typ, err string }

type eventKind uint8

const (
	eventPush eventKind = iota
	eventACK
	eventNACK
)

var eventNames = [...]string{eventPush: "push", eventACK: "ack", eventNACK: "nack"}

func (r *eventRing) put(ev event) {
	i := r.next
	if len(r.slots) < historyLen {
		if len(r.slots) == cap(r.slots) {
			room := historyLen
			if cap(r.slots) == 0 {
				room = historyFirst
			}
			grown := make([]slot, len(r.slots), room)
			copy(grown, r.slots)
			r.slots = grown
		}
		r.slots = r.slots[:len(r.slots)+1]
	}
	r.slots[i] = slot{at: ev.at, version: ev.version, id: ev.stream.id, delta: ev.stream.delta,
		resources: ev.resources, kind: ev.kind, typ: shortTypeNumbers[ev.typ]}
	rare := rareFields{err: ev.err}
	if r.slots[i].typ == 0 {
		rare.typ = ev.typ
	}
	switch {
	case r.rare != nil:
		r.rare[i] = rare
	case rare != rareFields{}:
		r.rare = new([historyLen]rareFields)
		r.rare[i] = rare
	}
	r.next = (r.next + 1) % historyLen
}

func (r *eventRing) event(i int) HistoryEvent {
	sl := r.slots[i]
	var rare rareFields
	if r.rare != nil {
		rare = r.rare[i]
	}
	typ := rare.typ
	if sl.typ > 0 {
		typ = shortTypes[shortTypeURLs[sl.typ-1]]
	}
	return HistoryEvent{At: time.Unix(0, sl.at), Stream: streamKey{delta: sl.delta, id: sl.id}.String(), Event: eventNames[sl.kind],
		Type: typ, Version: sl.version, Resources: int(sl.resources), Error: rare.err}
}

func newHistory() *history { return &history{nodes: map[string]*eventRing{}} }

func (h *history) record(node string, ev event) {
	if h == nil || node == "" {
		return
	}
	ev.err = truncate(ev.err, historyNACKText)
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.nodes[node]
	if r == nil {
		r = &eventRing{}
		h.nodes[node] = r
	}
	r.put(ev)
}

func (h *history) forget(node string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.nodes, node)
}

// History returns a connected node's last events, newest first, or nil.
func (s *Server) History(nodeID string) []HistoryEvent {
	s.history.mu.Lock()
	defer s.history.mu.Unlock()
	r := s.history.nodes[nodeID]
	if r == nil {
		return nil
	}
	evs := make([]HistoryEvent, 0, len(r.slots))
	for i := 1; i <= len(r.slots); i++ { // newest first
		evs = append(evs, r.event((r.next-i+historyLen)%historyLen))
	}
	return evs
}
