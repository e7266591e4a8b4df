package serve

import (
	"context"
	"sync"
)

// outbox is a stream's queue of answers, filled by the cache (under its
// lock, so push only appends and signals) and emptied by the stream's
// handler goroutine, the only one that sends (see delta.go). FIFO: the
// answers of one update go out in the order the cache made them
// (clusters before endpoints, listeners before routes).
type outbox[R any] struct {
	mu      sync.Mutex
	pending []R
	// ended says the stream is over (its reader stopped, with endErr,
	// or its context ended), for the sender to return.
	ended  bool
	endErr error
	wake   chan struct{} // one token: pending has something, or ended
	room   chan struct{} // one token: an answer was taken
}

// maxPending is how many answers a stream may have waiting before its
// reader stops acting on requests (waitRoom). The cache never blocks on a
// stream (push always appends) and adds at most one answer per watch a
// request filed, so bounding the requests bounds the queue: a client that
// sends but does not read gets what go-control-plane's servers gave it,
// its requests held back by HTTP/2 flow control, not a queue growing with
// every request. An update yields at most one answer per type.
const maxPending = 16

func newOutbox[R any]() *outbox[R] {
	return &outbox[R]{wake: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// waitRoom returns once fewer than maxPending answers wait, false if ctx
// ended first.
func (o *outbox[R]) waitRoom(ctx context.Context) bool {
	for {
		o.mu.Lock()
		n := len(o.pending)
		o.mu.Unlock()
		if n < maxPending {
			return true
		}
		select {
		case <-o.room:
		case <-ctx.Done():
			return false
		}
	}
}

func (o *outbox[R]) push(r R) {
	o.mu.Lock()
	o.pending = append(o.pending, r)
	o.mu.Unlock()
	o.signal()
}

func (o *outbox[R]) signal() {
	select {
	case o.wake <- struct{}{}:
	default: // a token is already waiting
	}
}

// end tells the sender the stream is over; the first reason counts.
func (o *outbox[R]) end(err error) {
	o.mu.Lock()
	if !o.ended {
		o.ended, o.endErr = true, err
	}
	o.mu.Unlock()
	o.signal()
}

// over is whether the stream ended, and why.
func (o *outbox[R]) over() (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ended, o.endErr
}

// next takes the oldest answer.
func (o *outbox[R]) next() (R, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var zero R
	if len(o.pending) == 0 {
		return zero, false
	}
	// Shifted down (at most maxPending): the array is kept for the next
	// answer, so one answer at a time allocates nothing, unless a burst
	// grew it.
	r := o.pending[0]
	n := copy(o.pending, o.pending[1:])
	o.pending[n] = zero
	o.pending = o.pending[:n]
	if n == 0 && cap(o.pending) > 4 {
		o.pending = nil
	}
	select {
	case o.room <- struct{}{}:
	default:
	}
	return r, true
}

// drop forgets what was not sent (the stream ended); an update's fan-out
// does not wait for a stream that is gone.
func (o *outbox[R]) drop() {
	o.mu.Lock()
	pending := o.pending
	o.pending = nil
	o.mu.Unlock()
	for _, r := range pending {
		handedOver(r)
	}
}

// pump is a stream handler's loop: it sends what o holds until the
// stream is over (o.end: the reading goroutine stopped, with its error,
// nil for a stream the client ended; or ctx ended, the stream or the
// server did: streamContext), or a send fails. nonce numbers the stream's
// responses from 1. It waits on the one channel, wake: a select over
// wake, the reader and the context cost ~1.6 µs per push, once per proxy
// per change.
func pump[R any](ctx context.Context, o *outbox[R], send func(r R, nonce int64) error) error {
	stop := context.AfterFunc(ctx, func() { o.end(nil) })
	defer stop()
	var nonce int64
	for {
		<-o.wake
		if over, err := o.over(); over {
			return err
		}
		for {
			r, ok := o.next()
			if !ok {
				break
			}
			nonce++
			err := send(r, nonce)
			handedOver(r)
			if err != nil {
				return err
			}
		}
	}
}
