package cache

import (
	"sync/atomic"
	"time"
)

// fanout follows one update of a key out to its streams, for
// consul_xds_bridge_push_fanout_seconds: from when the cache began
// answering the key's waiting watches to when the last of those answers
// was handed to gRPC (its stream's Send returned; gRPC's writer puts it
// on the wire right after), or was dropped because its stream ended. An
// answer still queued behind a stuck client holds the update open: it has
// not fanned out. So does a proxy that had no watch filed when the update
// was served (still acknowledging the one before): its next request, if
// it only acknowledges, is answered at once, and that answer counts while
// the update is still open; a request that changes what it subscribes
// to, or a stream's first, is the proxy's doing, not the update's. A
// make-before-break change serves a group in steps; each step is an
// update of its own. It is the server's half of a change's latency; the
// proxies' half (reading, applying, ACKing) is theirs.
type fanout struct {
	start time.Time
	// left is the answers not yet handed over, plus one while the cache
	// is still answering (so an early send cannot finish the update).
	left atomic.Int32
	done func(time.Duration)
}

func newFanout(done func(time.Duration)) *fanout {
	f := &fanout{start: time.Now(), done: done}
	f.left.Store(1)
	return f
}

// attach counts r, if it is one of the cache's answers, in the update's
// fan-out and reports whether it did. An answer to a stream catching up
// (late) counts only while the update has not fanned out yet, never
// reopening one that was observed. Nil-safe: no metric, no fan-out.
func (f *fanout) attach(r any, late bool) bool {
	if f == nil {
		return false
	}
	var slot **fanout
	switch a := r.(type) {
	case *SotwResponse:
		slot = &a.fan
	case *DeltaResponse:
		slot = &a.fan
	default:
		return false
	}
	if !late {
		f.left.Add(1)
	} else if !f.join() {
		return false
	}
	*slot = f
	return true
}

// join counts one more answer if the update has not fanned out yet.
func (f *fanout) join() bool {
	for {
		n := f.left.Load()
		if n == 0 {
			return false
		}
		if f.left.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// handed records that one answer was handed over (or dropped); the last
// one observes the update's fan-out time. Nil-safe: answers to requests,
// not updates, have none.
func (f *fanout) handed() {
	if f != nil && f.left.Add(-1) == 0 {
		f.done(time.Since(f.start))
	}
}

// fanned is an answer that may belong to an update's fan-out.
type fanned interface{ fanout() *fanout }

func (r *SotwResponse) fanout() *fanout  { return r.fan }
func (r *DeltaResponse) fanout() *fanout { return r.fan }

// InFanout is whether r is an answer of an update's fan-out.
func InFanout(r any) bool {
	f, ok := r.(fanned)
	return ok && f.fanout() != nil
}

// HandedOver records that r was handed over or dropped, if it belongs to
// an update's fan-out.
func HandedOver(r any) {
	if f, ok := r.(fanned); ok {
		f.fanout().handed()
	}
}
