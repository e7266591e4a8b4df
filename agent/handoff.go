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
	idle    *sync.Cond // on mu: running became false
	next    T
	pending bool
	running bool
}

// flush waits until every value offered so far has been handled.
func (h *handoff[T]) flush() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.running {
		if h.idle == nil {
			h.idle = sync.NewCond(&h.mu)
		}
		h.idle.Wait()
	}
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
			if h.idle != nil {
				h.idle.Broadcast()
			}
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
