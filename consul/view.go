package consul

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/hashicorp/consul/api"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
)

// QueryOptions tune every blocking query the watcher makes.
type QueryOptions struct {
	// Datacenter to query; "" means the agent's own.
	Datacenter string
	// Stale allows any server to answer, spreading load off the leader.
	Stale bool
	// UseCache reads service health through the agent's cache (?cached):
	// on a client agent with the streaming backend (the default since
	// Consul 1.10) the agent follows each service over one gRPC stream
	// from the servers instead of one blocking query per reader, and
	// shares it with every other local reader of that service. Local
	// datacenter only; see docs/scaling.md for the trade-off.
	UseCache bool
	// WaitTime is how long one blocking query may block (Consul caps it at 10m).
	WaitTime time.Duration
	// MinInterval is the floor between the starts of two queries of one view,
	// so a hot key cannot make us hammer Consul; it applies only after a
	// query that Consul answered without blocking (floor.go).
	MinInterval time.Duration
	// BackoffInitial and BackoffMax bound the jittered exponential backoff
	// after a failed query.
	BackoffInitial, BackoffMax time.Duration
}

func (o QueryOptions) withDefaults() QueryOptions {
	if o.WaitTime <= 0 {
		o.WaitTime = 60 * time.Second
	}
	if o.MinInterval <= 0 {
		o.MinInterval = 50 * time.Millisecond
	}
	if o.BackoffInitial <= 0 {
		o.BackoffInitial = 250 * time.Millisecond
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 30 * time.Second
	}
	return o
}

// requestTimeout bounds one HTTP call that blocks for up to wait: Consul
// adds up to wait/16 of jitter to a blocking query, and a frozen agent must
// still surface as an error eventually rather than hang the view forever.
func requestTimeout(wait time.Duration) time.Duration {
	return wait + wait/16 + 10*time.Second
}

// fetchFunc performs one query with the given options.
type fetchFunc[T any] func(q *api.QueryOptions) (T, *api.QueryMeta, error)

// view runs one blocking query in a loop, the way consul-template's
// watch/view.go does, and reports data only when it changed.
type view[T any] struct {
	// id names the query in logs, e.g. "health(web)".
	id    string
	fetch fetchFunc[T]
	equal func(a, b T) bool
	opts  QueryOptions
	log   zerolog.Logger
	// result, if set, is told about every query outcome (for metrics and
	// staleness tracking); it must not block.
	result func(err error, d time.Duration)
	// failed, if set, is told about every failed query before the backoff,
	// for owners whose state depends on errors and not only on data (a
	// remote datacenter that never answers). It may block until ctx ends.
	failed func(err error)
	// slots, if set, is the view's place in its watcher's query budget:
	// every request holds a slot, and blocks for no longer than the budget
	// allows.
	slots *member
	// clock is the view's time (floor, backoff, timestamps); nil is the
	// real clock. Tests pass a fake one.
	clock clockwork.Clock
}

// run blocks until ctx ends. emit is called with each changed value, the
// index it came with, and when the query returned.
func (v *view[T]) run(ctx context.Context, emit func(data T, index uint64, at time.Time)) {
	opts := v.opts.withDefaults()
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = opts.BackoffInitial
	bo.MaxInterval = opts.BackoffMax
	bo.RandomizationFactor = 0.5
	bo.Multiplier = 2
	bo.Reset()
	clock := v.clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}

	var (
		waitIndex uint64 // what the next query blocks on
		lastIndex uint64 // what Consul last answered, before sanitising
		last      T
		have      bool
		lastStart time.Time
		// floor is when the next query may start (zero: at once); see
		// floor.go.
		floor    time.Time
		failures int
	)
	for {
		if wait := clock.Until(floor); !floor.IsZero() && wait > 0 {
			// Jitter spreads out views that were woken by the same write.
			wait += rand.N(opts.MinInterval/4 + 1)
			if !sleepOn(ctx, clock, wait) {
				return
			}
		}
		// Waiting for a slot is not part of the request: its timeout, its
		// duration and the MinInterval floor all start once the slot is held.
		// A read that does not block holds its slot only for a round trip,
		// so it goes ahead of the views waiting their turn to block; that
		// also keeps a target added at run time from being pending for a
		// whole round.
		release, ok := v.slots.acquire(ctx, waitIndex == 0)
		if !ok {
			return
		}
		lastStart = clock.Now()
		sentIndex := waitIndex

		wait := v.slots.wait(opts.WaitTime)
		reqCtx, cancel := context.WithTimeout(ctx, requestTimeout(wait))
		q := (&api.QueryOptions{
			Datacenter: opts.Datacenter,
			AllowStale: opts.Stale,
			WaitIndex:  waitIndex,
			WaitTime:   wait,
		}).WithContext(reqCtx)
		data, meta, err := v.fetch(q)
		cancel()
		release()
		if ctx.Err() != nil {
			return
		}
		took := clock.Since(lastStart)
		// A failed query is floored too: its backoff sleeps first anyway.
		floor = lastStart.Add(opts.MinInterval)
		if v.result != nil {
			v.result(err, took)
		}
		if err == nil && meta == nil {
			err = errors.New("consul returned no query metadata")
		}
		if err != nil {
			failures++
			d := bo.NextBackOff()
			ev := v.log.Warn()
			if failures == 1 {
				ev = v.log.Error()
			}
			ev.Err(err).Str("query", v.id).Int("failures", failures).Dur("retry_in", d.Round(time.Millisecond)).
				Msg("consul query failed; keeping last good data")
			if v.failed != nil {
				v.failed(err)
			}
			if !sleepOn(ctx, clock, d) {
				return
			}
			continue
		}
		if failures > 0 {
			v.log.Info().Str("query", v.id).Int("failures", failures).Msg("consul query recovered")
			failures = 0
		}
		bo.Reset()
		floor = nextFloor(lastStart, took, sentIndex, opts.MinInterval)

		// Index rules from Consul's blocking-query docs: an index that goes
		// backwards (snapshot restore, new leader with older state) resets
		// to 0 so the next call returns at once with fresh data; an index of
		// 0 after a response would turn blocking into a busy loop, so it is
		// raised to 1.
		switch idx := meta.LastIndex; {
		case idx < lastIndex:
			v.log.Info().Str("query", v.id).Uint64("index", idx).Uint64("previous", lastIndex).
				Msg("consul index went backwards; resetting")
			waitIndex = 0
		default:
			waitIndex = max(idx, 1)
		}
		lastIndex = meta.LastIndex
		v.slots.saw(meta.LastIndex, opts.Stale)

		if have && v.equal(last, data) {
			continue
		}
		last, have = data, true
		emit(data, meta.LastIndex, clock.Now())
	}
}

// sleep waits for d or ctx, reporting whether it was d.
func sleep(ctx context.Context, d time.Duration) bool {
	return sleepOn(ctx, clockwork.NewRealClock(), d)
}

// sleepOn is sleep on clock.
func sleepOn(ctx context.Context, clock clockwork.Clock, d time.Duration) bool {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.Chan():
		return true
	}
}
