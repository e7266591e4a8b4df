package bridge

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

func TestCollectDue(t *testing.T) {
	const mb = 1 << 20
	// Live 40, goal 100: Go may start collecting at 82.
	h := func(objects uint64) heapState { return heapState{objects: objects * mb, live: 40 * mb, goal: 100 * mb} }
	for _, c := range []struct {
		name  string
		heap  heapState
		burst uint64
		want  bool
	}{
		{"two bursts would pass the earliest trigger", h(65), 10 * mb, true},
		{"two bursts fit before it", h(60), 10 * mb, false},
		{"no burst seen yet", h(95), 0, false},
		{"past the goal (a collection is under way)", h(101), 10 * mb, false},
		{"no goal read", heapState{objects: 90 * mb, live: 40 * mb}, 10 * mb, false},
	} {
		if got := collectDue(c.heap, c.burst); got != c.want {
			t.Errorf("%s: collectDue = %v, want %v", c.name, got, c.want)
		}
	}
	if idle(10*time.Millisecond, idleInterval) || !idle(9*time.Millisecond, idleInterval) {
		t.Error("idle: want under a tenth of a core over the interval")
	}
}

// TestIdleCollectorCollectsBeforeTheNextBurst drives the collector
// through scripted ticks: a busy interval, or an idle one while a change
// waits for its build, never collects; an idle one collects when the
// headroom left would not hold two of the last burst's allocations, and
// not otherwise; and once per idle spell.
func TestIdleCollectorCollectsBeforeTheNextBurst(t *testing.T) {
	ms := time.Millisecond
	// Per tick (0: at start): the process's CPU and the heap then.
	// Live 40 and goal 100 throughout: Go may start collecting at 82.
	hs := func(objects, allocs uint64) heapState {
		return heapState{objects: objects, live: 40, goal: 100, allocs: allocs}
	}
	script := []struct {
		cpu     time.Duration
		heap    heapState
		pending bool // a change waits for its build
	}{
		{0, hs(40, 0), false},
		{50 * ms, hs(70, 30), false},  // a fan-out
		{50 * ms, hs(70, 30), true},   // idle, but a change waits: no
		{50 * ms, hs(70, 30), false},  // idle: 70 + 2×30 passes 82: collect
		{50 * ms, hs(45, 30), false},  // idle, after the collection: not again
		{100 * ms, hs(55, 40), false}, // a fan-out of 10
		{100 * ms, hs(55, 40), false}, // idle: 55 + 2×10 fits
		{150 * ms, hs(60, 55), false}, // a fan-out of 15
		{150 * ms, hs(60, 55), false}, // idle: 60 + 15 fits, 60 + 2×15 does not: collect
		{150 * ms, hs(85, 55), false}, // idle, still short of room: not again
		{150 * ms, hs(85, 55), false}, // nor later in the same idle spell
	}
	clock := clockwork.NewFakeClock()
	var looks atomic.Int32
	var mu sync.Mutex
	var gcCPU time.Duration
	var reread bool
	var collectedAt []int
	c := &idleCollector{
		clock: clock,
		cpu: func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			i := int(looks.Load()) // the tick about to look at the heap
			if reread {            // within the tick that collected
				i, reread = i-1, false
			}
			return script[i].cpu + gcCPU
		},
		heap:    func() heapState { return script[looks.Add(1)-1].heap },
		pending: func() bool { return script[looks.Load()-1].pending },
		collect: func() {
			mu.Lock()
			defer mu.Unlock()
			gcCPU += 30 * ms // a collection costs CPU
			reread = true
			collectedAt = append(collectedAt, int(looks.Load())-1)
		},
		collected: func() {},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.run(ctx); close(done) }()
	if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	for k := 1; k < len(script); k++ {
		clock.Advance(idleInterval)
		deadline := time.Now().Add(10 * time.Second)
		for looks.Load() < int32(k+1) {
			if time.Now().After(deadline) {
				t.Fatalf("the collector did not look at the heap on tick %d", k)
			}
			time.Sleep(time.Millisecond)
		}
	}
	cancel() // the last tick is decided before the collector sees it
	<-done
	mu.Lock()
	defer mu.Unlock()
	if want := []int{3, 8}; !slices.Equal(collectedAt, want) {
		t.Errorf("collected on ticks %v, want %v", collectedAt, want)
	}
}
