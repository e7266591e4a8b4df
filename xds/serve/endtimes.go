package serve

import (
	"sync"
	"time"
)

// endTimes is a set of keys that each end at a time, with one timer,
// armed for the earliest end, that takes the keys whose end has come out
// and gives each to due. A timer per key, stopped within milliseconds as
// most are (an admission hold at its stream's sync, a wait at its first
// request), stayed in the runtime's timer heap until its end: ~300 bytes a
// proxy through a fleet's connect (bench/README.md, "Where a storm's
// memory stays").
type endTimes[K comparable] struct {
	due func(K) // called without the lock, once per key that ends

	mu    sync.Mutex
	ends  map[K]time.Time
	peak  int // the most keys at once since ends was made
	timer *time.Timer
	armed bool
}

func newEndTimes[K comparable](due func(K)) *endTimes[K] {
	return &endTimes[K]{due: due, ends: map[K]time.Time{}}
}

// add sets k to end after d. Keys added with one d end in the order they
// were added, so the timer, once armed, is armed for an earlier end.
func (e *endTimes[K]) add(k K, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ends[k] = time.Now().Add(d)
	e.peak = max(e.peak, len(e.ends))
	if !e.armed {
		e.armLocked(d)
	}
}

// remove takes k out before its end; false if it was not in (ended, or
// never added).
func (e *endTimes[K]) remove(k K) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.ends[k]
	delete(e.ends, k)
	if len(e.ends) == 0 && e.peak > 64 {
		// A map keeps the room of its most entries: a storm's keys
		// would hold it for good.
		e.ends, e.peak = map[K]time.Time{}, 0
	}
	return ok
}

// has reports whether k is in and not ended.
func (e *endTimes[K]) has(k K) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.ends[k]
	return ok
}

func (e *endTimes[K]) armLocked(d time.Duration) {
	if e.timer == nil {
		e.timer = time.AfterFunc(d, e.expire)
	} else {
		e.timer.Reset(d)
	}
	e.armed = true
}

// expire takes out the keys whose end has come, arms the timer for the
// next end if a key is left, and gives the ended keys to due.
func (e *endTimes[K]) expire() {
	e.mu.Lock()
	now := time.Now()
	var ended []K
	var next time.Time
	for k, end := range e.ends {
		switch {
		case !end.After(now):
			ended = append(ended, k)
			delete(e.ends, k)
		case next.IsZero() || end.Before(next):
			next = end
		}
	}
	e.armed = false
	if !next.IsZero() {
		e.armLocked(next.Sub(now))
	}
	e.mu.Unlock()
	for _, k := range ended {
		e.due(k)
	}
}
