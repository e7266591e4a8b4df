package serve

import (
	"errors"
	"sync"
	"time"
)

// firstWaits is the streams waiting for their first request
// (firstRequestInterceptor), with one timer, armed for the earliest
// wait's end, that ends the waits that run out. A timer per stream,
// stopped when its first request came a few milliseconds later, stayed
// in the runtime's timer heap for the timeout's 30 s: ~140 bytes a proxy
// through a fleet's connect (bench/README.md, "Where a storm's memory
// stays").
type firstWaits struct {
	timeout time.Duration

	mu sync.Mutex
	// ends holds each wait's end by the channel its read answers on.
	ends  map[chan error]time.Time
	peak  int // the most waits at once since ends was made
	timer *time.Timer
	armed bool
}

// errNoFirstRequest is what a wait that ran out gets on its channel.
var errNoFirstRequest = errors.New("no first request within the timeout")

func newFirstWaits(timeout time.Duration) *firstWaits {
	return &firstWaits{timeout: timeout, ends: map[chan error]time.Time{}}
}

// add starts got's wait. got must have room for the read's answer and
// errNoFirstRequest.
func (w *firstWaits) add(got chan error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ends[got] = time.Now().Add(w.timeout)
	w.peak = max(w.peak, len(w.ends))
	if !w.armed { // else armed for an earlier end: waits end in the order they start
		w.armLocked(w.timeout)
	}
}

// remove ends got's wait.
func (w *firstWaits) remove(got chan error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.ends, got)
	if len(w.ends) == 0 && w.peak > 64 {
		// A map keeps the room of its most entries: a storm's waits
		// would hold it for good.
		w.ends, w.peak = map[chan error]time.Time{}, 0
	}
}

func (w *firstWaits) armLocked(d time.Duration) {
	if w.timer == nil {
		w.timer = time.AfterFunc(d, w.expire)
	} else {
		w.timer.Reset(d)
	}
	w.armed = true
}

// expire tells the waits that ran out, and arms the timer for the next
// end, if a stream still waits.
func (w *firstWaits) expire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	var next time.Time
	for got, end := range w.ends {
		switch {
		case !end.After(now):
			select {
			case got <- errNoFirstRequest:
			default: // its read answered already
			}
			delete(w.ends, got)
		case next.IsZero() || end.Before(next):
			next = end
		}
	}
	w.armed = false
	if !next.IsZero() {
		w.armLocked(next.Sub(now))
	}
}
