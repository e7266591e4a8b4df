package serve

import (
	"sync"
	"time"
)

// History keeps, per connected node id, its last pushes, ACKs and NACKs
// (across its streams), for the console's proxy page: a status shows
// where a proxy is, the history how it got there. It is bounded: at most
// historyLen events per node and historyNACKText bytes of a NACK's text,
// about 2 KiB a proxy, and a node's history goes when its last stream
// does.
type history struct {
	mu    sync.Mutex
	nodes map[string]*eventRing
}

// eventRing holds a node's last historyLen events in place: recording
// one allocates nothing, which matters when a change is pushed to
// thousands of proxies at once (each push and ACK is an event).
type eventRing struct {
	events [historyLen]event
	next   int // where the next event goes
	n      int // events held, up to historyLen
}

const (
	historyLen      = 20
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

// event is a HistoryEvent as a ring holds it: ~70 bytes instead of ~130
// (a wall clock in nanoseconds, the stream's key rather than its name,
// the kind as a number), 20 per connected proxy.
type event struct {
	at        int64 // Unix nanoseconds
	typ       string
	version   string
	err       string
	stream    streamKey
	resources int32
	kind      eventKind
}

type eventKind uint8

const (
	eventPush eventKind = iota
	eventACK
	eventNACK
)

var eventNames = [...]string{eventPush: "push", eventACK: "ack", eventNACK: "nack"}

func (ev event) public() HistoryEvent {
	return HistoryEvent{At: time.Unix(0, ev.at), Stream: ev.stream.String(), Event: eventNames[ev.kind],
		Type: ev.typ, Version: ev.version, Resources: int(ev.resources), Error: ev.err}
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
	r.events[r.next] = ev
	r.next = (r.next + 1) % historyLen
	r.n = min(r.n+1, historyLen)
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
	evs := make([]HistoryEvent, 0, r.n)
	for i := 1; i <= r.n; i++ { // newest first
		evs = append(evs, r.events[(r.next-i+historyLen)%historyLen].public())
	}
	return evs
}
