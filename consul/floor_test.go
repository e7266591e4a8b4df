package consul

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
)

func TestNextFloor(t *testing.T) {
	const minInterval = 50 * time.Millisecond
	start := time.Unix(1_000_000, 0)
	for name, c := range map[string]struct {
		took      time.Duration
		waitIndex uint64
		want      time.Time
	}{
		"answered at once: the key keeps changing":             {took: time.Millisecond, waitIndex: 7, want: start.Add(minInterval)},
		"blocked 20 ms: the first change after a quiet period": {took: 20 * time.Millisecond, waitIndex: 7},
		"blocked 5 ms: back-to-back changes of a small fleet":  {took: 5 * time.Millisecond, waitIndex: 7},
		"blocked a minute":                      {took: time.Minute, waitIndex: 7},
		"a first read does not block by design": {took: time.Millisecond, waitIndex: 0},
	} {
		t.Run(name, func(t *testing.T) {
			if got := nextFloor(start, c.took, c.waitIndex, minInterval); !got.Equal(c.want) {
				t.Errorf("next query at %v, want %v (zero: at once)", got, c.want)
			}
		})
	}
}

// TestViewFloorsOnlyAKeyThatKeepsChanging runs a view on a fake clock
// against a fetch the test answers: after a query Consul held for 5 ms
// (a change 5 ms after the one before: back-to-back changes) the next
// query is sent at once, not at the 50 ms floor; after a query answered
// at once (the data moved before it was sent) the next waits the floor.
func TestViewFloorsOnlyAKeyThatKeepsChanging(t *testing.T) {
	const minInterval = 50 * time.Millisecond
	t0 := time.Unix(1_000_000, 0)
	clock := clockwork.NewFakeClockAt(t0)
	type call struct {
		at        time.Time
		waitIndex uint64
	}
	calls := make(chan call)
	answers := make(chan uint64)
	v := view[uint64]{
		id: "test",
		fetch: func(q *api.QueryOptions) (uint64, *api.QueryMeta, error) {
			select {
			case calls <- call{clock.Now(), q.WaitIndex}:
			case <-q.Context().Done():
				return 0, nil, q.Context().Err()
			}
			select {
			case idx := <-answers:
				return idx, &api.QueryMeta{LastIndex: idx}, nil
			case <-q.Context().Done():
				return 0, nil, q.Context().Err()
			}
		},
		equal: func(a, b uint64) bool { return a == b },
		opts:  QueryOptions{MinInterval: minInterval, WaitTime: time.Minute},
		log:   zerolog.New(zerolog.NewTestWriter(t)),
		clock: clock,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		v.run(ctx, func(uint64, uint64, time.Time) {})
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done })
	next := func(what string) call {
		t.Helper()
		select {
		case c := <-calls:
			return c
		case <-time.After(10 * time.Second):
			t.Fatalf("no query: %s", what)
			return call{}
		}
	}
	noQuery := func(what string) {
		t.Helper()
		select {
		case c := <-calls:
			t.Fatalf("a query at %v: %s", c.at.Sub(t0), what)
		case <-time.After(50 * time.Millisecond):
		}
	}

	next("the first read")
	answers <- 1
	if c := next("the first blocking query"); !c.at.Equal(t0) || c.waitIndex != 1 {
		t.Fatalf("first blocking query at +%v on index %d, want at once on 1", c.at.Sub(t0), c.waitIndex)
	}
	// Consul holds it 5 ms, then a change (back-to-back changes).
	clock.Advance(5 * time.Millisecond)
	answers <- 2
	if c := next("after a query that blocked"); !c.at.Equal(t0.Add(5 * time.Millisecond)) {
		t.Errorf("query after one that blocked 5 ms at +%v, want at once (+5ms), not at the floor", c.at.Sub(t0))
	}
	// The data moved before the query was sent: answered at once.
	answers <- 3
	ctxWait, cancelWait := context.WithTimeout(ctx, 10*time.Second)
	defer cancelWait()
	if err := clock.BlockUntilContext(ctxWait, 1); err != nil {
		t.Fatalf("the view is not waiting for its floor: %v", err)
	}
	clock.Advance(minInterval - time.Millisecond)
	noQuery("before the floor, after a query answered at once")
	clock.Advance(minInterval/4 + time.Millisecond) // past the floor and its jitter
	if c := next("after the floor"); c.at.Before(t0.Add(5*time.Millisecond + minInterval)) {
		t.Errorf("query after one answered at once at +%v, want at least the floor (+55ms)", c.at.Sub(t0))
	}
}
