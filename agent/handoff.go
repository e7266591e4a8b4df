package agent

import "sync"

// handoff runs fn on values offered to it, one at a time and in order,
// on a goroutine of its own, so the caller (a stream's reader) returns at
// once. Values offered while fn runs collapse into one: merge(pending,
// newer) decides what is kept (each relayed state is a stream's whole
// state, so the newest wins). No goroutine is left when nothing is
// pending.
type handoff[T any] struct {
	fn    func(T)
	merge func(pending, newer T) T

	mu      sync.Mutex
	next    T
	pending bool
	running bool
}

func (h *handoff[T]) offer(v T) {
	h.mu.Lock()
	if h.pending {
		v = h.merge(h.next, v)
	}
	h.next, h.pending = v, true
	start := !h.running
	h.running = true
	h.mu.Unlock()
	if start {
		go h.run()
	}
}

func (h *handoff[T]) run() {
	for {
		h.mu.Lock()
		if !h.pending {
			h.running = false
			h.mu.Unlock()
			return
		}
		v := h.next
		var zero T
		h.next, h.pending = zero, false
		h.mu.Unlock()
		h.fn(v)
	}
}
