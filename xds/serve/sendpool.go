package serve

import (
	"runtime"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// sendPool runs the sending turns (outbox.run) that an update starts on
// a few goroutines that outlive them.
//
// Why not a goroutine per turn: an update reaches every proxy that
// follows what changed at once, so its fan-out started one goroutine per
// stream. Go frees the stacks of exited goroutines at every collection,
// so the first change after a quiet spell (in a fleet, most changes)
// needed a new stack per proxy before its first byte went out. And all
// the turns ran before any connection flushed: gRPC's writer yields once
// with a batch under 1,000 bytes before it writes, holding its 8 KiB
// write buffer, so every connection held one at once; the buffers' pool
// is emptied by two collections, so that change allocated them afresh
// too. At N = 1,000 such a change reached its last proxy ~30 ms later
// than the next one did (bench/README.md, "Sending an update from a
// pool").
//
// A worker yields after each turn, so the writer the turn woke flushes
// before the turn after next wakes another: a fan-out holds about two
// buffers per worker, and the first proxies have their answer while the
// last are still being served. min workers stay; more start while turns
// wait (one per perWorker of them, at most max) and leave when none do.
//
// A send blocks only when its client does not read (gRPC's write quota,
// HTTP/2 flow control). A worker whose turn has lasted stuckAfter stops
// counting against the pool: another starts in its place, and it exits
// when its turn ends. The pool looks again every stuckAfter while turns
// wait, since the new workers may meet such clients too: turns behind m
// of them wait about m / workers × stuckAfter. A client that does not read holds one goroutine, as
// it did before, and never the other proxies' sends.
type sendPool struct {
	clock clockwork.Clock
	// min workers wait while no turn does; up to max run while turns
	// wait. A worker yields after each turn and every other runnable
	// goroutine runs before it is back, so min alone would pace a large
	// fan-out to min turns per round of the scheduler.
	min, max   int
	stuckAfter time.Duration
	// detached counts workers left to a blocked send (metrics).
	detached func()

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []turner
	head    int
	idle    int                  // workers waiting for a turn, not yet woken
	woken   int                  // workers woken for a turn, not yet running
	counted int                  // workers counted against max
	busy    map[*sendWorker]bool // counted workers in a turn
	checkAt bool                 // a stuck check is scheduled
	closed  bool
}

type sendWorker struct {
	since    time.Time // the start of its turn
	detached bool
}

// defaultStuckAfter: a healthy send is microseconds of CPU; a worker
// waiting this long for the core (one core, a build running) is counted
// as stuck too, which costs one goroutine more for a while.
const defaultStuckAfter = 50 * time.Millisecond

// perWorker is how many waiting turns make the pool start one more worker.
const perWorker = 16

// maxSendWorkers bounds the workers, and so the write buffers a fan-out
// holds at once (~2 each).
const maxSendWorkers = 256

func newSendPool(clock clockwork.Clock, detached func()) *sendPool {
	p := &sendPool{clock: clock, min: 2 * runtime.GOMAXPROCS(0), max: maxSendWorkers,
		stuckAfter: defaultStuckAfter, detached: detached, busy: map[*sendWorker]bool{}}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// turner is a sending turn: a stream's outbox, which the pool holds as
// itself. A function per turn (the outbox's method value) was an
// allocation for every proxy an update reached.
type turner interface{ runTurn() }

// Run runs turn on a worker, in the order turns were given. A nil pool
// (tests of streams alone) runs it on a goroutine of its own.
func (p *sendPool) Run(turn turner) {
	if p == nil {
		go turn.runTurn()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		go turn.runTurn() // the server is stopping: its streams still end
		return
	}
	p.queue = append(p.queue, turn)
	switch {
	case p.idle > 0:
		// Counted as woken at once: a burst of turns must not count
		// one waiting worker many times over.
		p.idle--
		p.woken++
		p.cond.Signal()
	case p.needLocked():
		p.startLocked()
	case !p.checkAt:
		p.checkLocked()
	}
}

// needLocked is whether turns wait for a worker the pool may start: it has
// fewer than min, or fewer than one per perWorker waiting turns (at most
// max).
func (p *sendPool) needLocked() bool {
	w := p.waitingLocked() - p.woken
	return w > 0 && (p.counted < p.min || p.counted < p.max && w > p.counted*perWorker)
}

func (p *sendPool) waitingLocked() int { return len(p.queue) - p.head }

func (p *sendPool) startLocked() {
	p.counted++
	go p.work(&sendWorker{})
}

// checkLocked detaches the workers whose turn has lasted stuckAfter and
// starts as many in their place (and more, as Go would); while turns
// wait, it looks again when the next worker would be stuck, or after
// stuckAfter (the new workers may meet clients that do not read too).
func (p *sendPool) checkLocked() {
	if p.waitingLocked() == 0 {
		return
	}
	now := p.clock.Now()
	before := p.counted
	next := p.stuckAfter
	for w := range p.busy {
		if d := now.Sub(w.since); d >= p.stuckAfter {
			w.detached = true
			delete(p.busy, w)
			p.counted--
			if p.detached != nil {
				p.detached()
			}
		} else if left := p.stuckAfter - d; left < next {
			next = left
		}
	}
	for p.counted < before || p.needLocked() {
		p.startLocked()
	}
	if !p.checkAt {
		p.checkAt = true
		p.clock.AfterFunc(next, func() {
			p.mu.Lock()
			p.checkAt = false
			p.checkLocked()
			p.mu.Unlock()
		})
	}
}

// stop lets the workers exit once no turn waits; turns given after it
// run on goroutines of their own.
func (p *sendPool) stop() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
}

// work runs turns until it is detached, the pool stops, or no turn waits
// and the pool has more than min workers. It yields after each turn, so
// the gRPC writer the turn woke runs (and flushes) before the next turn
// wakes another.
func (p *sendPool) work(w *sendWorker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for p.waitingLocked() == 0 {
			if p.closed || p.counted > p.min {
				p.counted--
				return
			}
			p.idle++
			p.cond.Wait()
			if p.woken > 0 {
				p.woken--
			} else {
				p.idle-- // woken by stop's broadcast
			}
		}
		turn := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		switch {
		case p.head == len(p.queue):
			p.queue, p.head = p.queue[:0], 0
		case p.head > 64 && p.head > len(p.queue)/2:
			// Never empty under steady load: keep the slice from growing.
			n := copy(p.queue, p.queue[p.head:])
			clear(p.queue[n:])
			p.queue, p.head = p.queue[:n], 0
		}
		w.since = p.clock.Now()
		p.busy[w] = true
		p.mu.Unlock()
		turn.runTurn()
		runtime.Gosched()
		p.mu.Lock()
		if w.detached {
			return
		}
		delete(p.busy, w)
	}
}
