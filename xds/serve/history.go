package serve

import (
	"slices"
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
	nodes map[string][]HistoryEvent
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

func newHistory() *history { return &history{nodes: map[string][]HistoryEvent{}} }

func (h *history) record(node string, ev HistoryEvent) {
	if h == nil || node == "" {
		return
	}
	ev.Error = truncate(ev.Error, historyNACKText)
	h.mu.Lock()
	defer h.mu.Unlock()
	evs := append(h.nodes[node], ev)
	if len(evs) > historyLen {
		evs = slices.Clone(evs[len(evs)-historyLen:])
	}
	h.nodes[node] = evs
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
	evs := slices.Clone(s.history.nodes[nodeID])
	slices.Reverse(evs)
	return evs
}
