package serve

import (
	"context"
	"sync"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	"google.golang.org/grpc/status"
)

// outbox is a stream's queue of answers, filled by the cache (under its
// lock, so push only appends and, at most, starts a goroutine) and
// emptied by a sending goroutine that exists only while there is
// something to send. FIFO: the answers of one update go out in the order
// the cache made them (clusters before endpoints, listeners before
// routes).
//
// Why the sender comes and goes: an idle stream is what a fleet is made
// of. A sender parked between pushes keeps the stack its sends grew (8 KiB
// here: the runtime shrinks a parked stack only when a quarter of it
// would do), and the collector scans it and counts it in the heap's goal.
// An update's turn runs on the server's pool of send workers
// (sendpool.go), any other on a goroutine of its own, and an idle stream
// holds only the handler's goroutine, which reads.
type outbox[R any] struct {
	mu      sync.Mutex
	pending []R
	// inline is where pending lives while it holds at most two answers
	// (a stream's usual queue): an array of its own, kept between pushes,
	// was a small object per stream, grown among a connect's garbage.
	inline [2]R
	// send is the stream's sender, which has its context (startSender); send
	// is nil in tests that only look at what is queued.
	send answerSender[R]
	// pool runs the sending turns an update starts (nil: a goroutine of
	// their own, as other turns).
	pool *sendPool
	// sending says a sender goroutine runs; only it touches nonce, which
	// numbers the stream's responses from 1. ended says no sender may
	// start again (stop), or a send failed with sendErr. (The two flags
	// share a word.)
	sending, ended bool
	nonce          int64
	sendErr        error
	senders        sync.WaitGroup
	// room gets a token when an answer is taken; made the first time the
	// queue is full (waitRoom), which few streams ever see.
	room chan struct{}
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
	o := &outbox[R]{}
	o.init()
	return o
}

// init readies an outbox in place (a stream's, embedded).
func (o *outbox[R]) init() { o.pending = o.inline[:0] }

// startSender sets the sender (the stream: runStreamOps), and the
// server's pool (nil: a goroutine per turn); answers already queued go
// out now.
func (o *outbox[R]) startSender(send answerSender[R], pool *sendPool) {
	o.mu.Lock()
	o.send, o.pool = send, pool
	run := o.claimLocked()
	o.mu.Unlock()
	if run {
		go o.run()
	}
}

// waitRoom returns once fewer than maxPending answers wait, false if ctx
// ended first: a stream whose context ended reads no more.
func (o *outbox[R]) waitRoom(ctx context.Context) bool {
	for ctx.Err() == nil {
		o.mu.Lock()
		n := len(o.pending)
		if n >= maxPending && o.room == nil {
			o.room = make(chan struct{}, 1)
		}
		room := o.room
		o.mu.Unlock()
		if n < maxPending {
			return true
		}
		select {
		case <-room:
		case <-ctx.Done():
		}
	}
	return false
}

func (o *outbox[R]) push(r R) {
	o.mu.Lock()
	o.pending = append(o.pending, r)
	run := o.claimLocked()
	o.mu.Unlock()
	if run {
		o.spawnRun(r)
	}
}

// spawnRun starts a sending turn that begins with r. An update's answers
// (r belongs to its fan-out) go to the server's pool: every stream gets
// one at once, and the pool's few goroutines send them in turn
// (sendpool.go). An answer to a request (a stream's initial state, a
// change of what it subscribes to) gets a goroutine of its own, as it
// did before: a reconnect storm's streams wait for their initial state
// turn by turn, and admission control keeps them few, so a queue shared
// with every other stream would only slow each step of their syncs.
func (o *outbox[R]) spawnRun(r R) {
	if cache.InFanout(r) {
		o.pool.Run(o)
		return
	}
	go o.run()
}

// claimLocked is whether the caller is to start the sender: there is
// something to send, a sender is set, none runs and the stream goes on.
func (o *outbox[R]) claimLocked() bool {
	if o.sending || o.ended || o.send == nil || len(o.pending) == 0 {
		return false
	}
	o.sending = true
	o.senders.Add(1)
	return true
}

// run is the sending goroutine: it sends until nothing waits, the stream
// stops, or a send fails. Then the stream is over: gRPC ends a stream
// whose send failed with the send's status, and endStream does for a
// failure of the bridge's own (a response it could not make), so the
// handler's read wakes; stop reports the status.
// runTurn is a sending turn the server's pool runs (sendpool.go).
func (o *outbox[R]) runTurn() { o.run() }

func (o *outbox[R]) run() {
	defer o.senders.Done()
	for {
		r, ok := o.next()
		if !ok {
			return
		}
		o.nonce++
		err := o.send.sendAnswer(r, o.nonce)
		cache.HandedOver(r)
		if err != nil {
			o.mu.Lock()
			o.ended, o.sendErr, o.sending = true, err, false
			o.mu.Unlock()
			endStream(o.send.streamContext(), status.Convert(err))
			return
		}
	}
}

// next takes the oldest answer for the sender, or ends its turn (false)
// when there is none or the stream stopped.
func (o *outbox[R]) next() (R, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var zero R
	if len(o.pending) == 0 || o.ended {
		o.sending = false
		return zero, false
	}
	// Shifted down (at most maxPending): one answer at a time stays in
	// inline and allocates nothing; a burst's array goes when it drains.
	r := o.pending[0]
	n := copy(o.pending, o.pending[1:])
	o.pending[n] = zero
	o.pending = o.pending[:n]
	if n == 0 && cap(o.pending) > len(o.inline) {
		o.pending = o.inline[:0]
	}
	select {
	case o.room <- struct{}{}: // nil until a wait made it: no one waits
	default:
	}
	return r, true
}

// stop ends sending: no sender starts again, and a running one finishes
// the send it is in. A send blocked by a client that does not read holds
// it until gRPC ends the stream (as the handler's own send did before).
// It returns the error a send failed with, if one did.
func (o *outbox[R]) stop() error {
	o.mu.Lock()
	o.ended = true
	o.mu.Unlock()
	o.senders.Wait()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sendErr
}

// drop forgets what was not sent (the stream ended); an update's fan-out
// does not wait for a stream that is gone.
func (o *outbox[R]) drop() {
	o.mu.Lock()
	pending := o.pending
	o.pending = nil
	o.mu.Unlock()
	for _, r := range pending {
		cache.HandedOver(r)
	}
}
