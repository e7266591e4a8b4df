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
	wake    chan struct{} // one token: pending has something
	room    chan struct{} // one token: an answer was taken
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
	select {
	case o.wake <- struct{}{}:
	default: // a token is already waiting
	}
}

// next takes the oldest answer.
func (o *outbox[R]) next() (R, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var zero R
	if len(o.pending) == 0 {
		return zero, false
	}
	r := o.pending[0]
	o.pending[0] = zero
	o.pending = o.pending[1:]
	if len(o.pending) == 0 {
		o.pending = nil // do not keep the backing array of a burst
	}
	select {
	case o.room <- struct{}{}:
	default:
	}
	return r, true
}

// drop forgets what was not sent (the stream ended).
func (o *outbox[R]) drop() {
	o.mu.Lock()
	o.pending = nil
	o.mu.Unlock()
}

// pump is a stream handler's loop: it sends what o holds until the
// reading goroutine ends (its error, nil for a stream the client ended),
// ctx ends (the stream or the server did: streamContext), or a send
// fails. nonce numbers the stream's responses from 1.
func pump[R any](ctx context.Context, o *outbox[R], recvErr <-chan error, send func(r R, nonce int64) error) error {
	var nonce int64
	for {
		select {
		case <-o.wake:
			for {
				r, ok := o.next()
				if !ok {
					break
				}
				nonce++
				if err := send(r, nonce); err != nil {
					return err
				}
			}
		case err := <-recvErr:
			return err
		case <-ctx.Done():
			return nil
		}
	}
}
