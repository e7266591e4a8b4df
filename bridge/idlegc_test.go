package bridge

import (
	"context"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
)

// TestReleaseDue: memory goes back to the OS only when what a
// collection would leave free is worth it, and only after a storm of
// streams (a change's fan-out opens none).
func TestReleaseDue(t *testing.T) {
	const mb = 1 << 20
	h := func(objects, live, free uint64) heapState {
		return heapState{objects: objects * mb, live: live * mb, goal: 2 * live * mb, free: free * mb}
	}
	for _, c := range []struct {
		name string
		heap heapState
		want bool
	}{
		{"garbage", h(90, 40, 0), true},
		{"free spans, little garbage", h(45, 40, 30), true},
		{"under an eighth of the objects", h(300, 290, 20), false},
		{"under 8 MiB", h(20, 16, 3), false},
		{"right after a collection: objects a little under live, free spans", heapState{objects: 40*mb - 300, live: 40 * mb, goal: 80 * mb, free: 30 * mb}, true},
		{"fewer objects than live, little free", h(30, 40, 3), false},
	} {
		if got := releaseDue(c.heap); got != c.want {
			t.Errorf("%s: releaseDue = %v, want %v", c.name, got, c.want)
		}
	}
	for _, c := range []struct {
		open   int
		opened uint64
		want   bool
	}{
		{10000, 10000, true}, // a fleet's connect
		{10000, 1000, true},  // a tenth of it reconnected
		{10000, 999, false},
		{0, 10000, true}, // a fleet gone again
		{50, 99, false},  // a small fleet: at least 100
		{50, 100, true},
		{100000, 9999, false},
	} {
		if got := stormed(c.open, c.opened); got != c.want {
			t.Errorf("stormed(%d open, %d opened) = %v, want %v", c.open, c.opened, got, c.want)
		}
	}
}

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
		{"nothing to free: Go just collected, or a memory limit holds the heap", h(41), 30 * mb, false},
		{"GOGC=off: no goal to reach", heapState{objects: 900 * mb, live: 40 * mb, goal: 1 << 63}, 100 * mb, false},
		{"a burst past the runway, garbage to free", h(90), 500 * mb, true},
		{"a burst past the runway, little garbage", h(45), 500 * mb, false},
		// What a fleet's connect left: short of the trigger, but most of
		// the runway garbage; the first change's fan-out would cross it.
		{"a burst past the runway, most of it garbage", h(78), 500 * mb, true},
		{"a burst past the runway, under half of it garbage", h(60), 500 * mb, false},
		{"a burst just past the runway (42.2), half of it garbage", h(62), 43 * mb, true},
		{"a burst just under the runway, half of it garbage", h(62), 40 * mb, true},
		{"a burst just under the runway, under half of it garbage", h(60), 40 * mb, false},
		{"fewer objects than live (nothing to free)", heapState{objects: 30 * mb, live: 40 * mb, goal: 100 * mb}, 40 * mb, false},
	} {
		if got := collectDue(c.heap, c.burst); got != c.want {
			t.Errorf("%s: collectDue = %v, want %v", c.name, got, c.want)
		}
	}
	if idle(10*time.Millisecond, idleInterval) || !idle(9*time.Millisecond, idleInterval) {
		t.Error("idle: want under a tenth of a core over the interval")
	}
}

// TestReadHeapReadsTheRuntime: every sample exists in this Go (a renamed
// metric would read 0 and turn the collector off without a word).
func TestHeapReaderReadsTheRuntime(t *testing.T) {
	runtime.GC()
	keep := make([][]byte, 100)
	for i := range keep {
		keep[i] = make([]byte, 1<<10)
	}
	read := heapReader()
	h := read()
	if h.objects == 0 || h.live == 0 || h.goal <= h.live || h.allocs < h.objects {
		t.Errorf("heapReader = %+v, want objects, live, a goal above live and cumulative allocations", h)
	}
	runtime.KeepAlive(keep)
	// The samples are reused: a read allocates nothing.
	if n := testing.AllocsPerRun(100, func() { h = read() }); n != 0 {
		t.Errorf("a heap read allocates %v times, want 0", n)
	}
	// ...and still follows the heap.
	before := h.allocs
	keep = make([][]byte, 100)
	for i := range keep {
		keep[i] = make([]byte, 1<<10)
	}
	runtime.GC() // flushes the per-P allocation counts the metric sums
	if after := read().allocs; after < before+100<<10 {
		t.Errorf("allocations read %d after 100 KiB more, want at least %d", after, before+100<<10)
	}
	runtime.KeepAlive(keep)
}

// TestIdleCollectorCollectsBeforeTheNextBurst drives the collector
// through scripted ticks: a busy interval, or an idle one while a change
// waits for its build or in which a build ran, never collects; an idle one collects when the
// headroom left would not hold two of the last burst's allocations, and
// not otherwise; and once per idle spell.
func TestIdleCollectorCollectsBeforeTheNextBurst(t *testing.T) {
	ms := time.Millisecond
	// Per tick (0: at start): the process's CPU and the heap then.
	// Live 40 and goal 100 throughout: Go may start collecting at 82.
	hs := func(objects, allocs uint64) heapState { // in MiB
		return heapState{objects: objects << 20, live: 40 << 20, goal: 100 << 20, allocs: allocs << 20}
	}

	script := []struct {
		cpu     time.Duration
		heap    heapState
		pending bool   // a change waits for its build, or is being built
		builds  uint64 // builds done
	}{
		{0, hs(40, 0), false, 0},
		{50 * ms, hs(70, 30), false, 1}, // a build and its fan-out
		{50 * ms, hs(70, 30), true, 1},  // idle, but a change waits: no
		{52 * ms, hs(72, 32), false, 2}, // its build, cheap: idle by CPU, but a fan-out starts: no
		{52 * ms, hs(72, 32), false, 2}, // idle: 72 + 2×32 passes 82: collect
		// Idle after the collection, whose CPU is not work, so the few
		// MiB allocated meanwhile are no burst (as work, 4 + the next
		// fan-out's 10 would pass 82 on the tick after it): not again.
		{52 * ms, hs(45, 36), false, 2},
		{100 * ms, hs(55, 46), false, 3}, // a fan-out of 10
		{100 * ms, hs(55, 46), false, 3}, // idle: 55 + 2×10 fits
		{150 * ms, hs(60, 61), false, 4}, // a fan-out of 15
		{150 * ms, hs(60, 61), false, 4}, // idle: 60 + 15 fits, 60 + 2×15 does not: collect
		{150 * ms, hs(85, 61), false, 4}, // idle, still short of room: not again
		{150 * ms, hs(85, 61), false, 4}, // nor later in the same idle spell
		// A storm: 2,000 streams open. Idle after it, with 45 MiB of
		// garbage: collect and return the free memory, once, when an
		// interval opened no stream.
		{650 * ms, hs(85, 461), false, 4},
		{650 * ms, hs(85, 461), false, 4}, // idle, streams still opening: only the usual collection
		{650 * ms, hs(85, 461), false, 4}, // idle and quiet: release
		{650 * ms, hs(42, 462), false, 4}, // idle after it: nothing
		{650 * ms, hs(60, 480), false, 4}, // nor with garbage again: the storm was looked at
		{650 * ms, hs(60, 480), false, 4},
	}
	// Streams opened by the tick that looks (the storm on ticks 12 and 13).
	opened := func(tick int) uint64 {
		switch {
		case tick >= 13:
			return 2000
		case tick == 12:
			return 1500
		}
		return 0
	}
	clock := clockwork.NewFakeClock()
	var looks atomic.Int32
	var mu sync.Mutex
	var gcCPU time.Duration
	var reread bool
	var collectedAt, releasedAt []int
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
		heap: func() heapState { return script[looks.Add(1)-1].heap },
		builds: func() (bool, uint64) {
			st := script[max(looks.Load()-1, 0)]
			return st.pending, st.builds
		},
		collect: func() {
			mu.Lock()
			defer mu.Unlock()
			gcCPU += 30 * ms // a collection costs CPU
			reread = true
			collectedAt = append(collectedAt, int(looks.Load())-1)
		},
		release: func() {
			mu.Lock()
			defer mu.Unlock()
			gcCPU += 40 * ms
			reread = true
			releasedAt = append(releasedAt, int(looks.Load())-1)
		},
		streams:   func() (int, uint64) { n := opened(int(looks.Load()) - 1); return int(n), n },
		collected: func() {},
		released:  func() {},
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
	if want := []int{4, 9, 13}; !slices.Equal(collectedAt, want) {
		t.Errorf("collected (only) on ticks %v, want %v", collectedAt, want)
	}
	if want := []int{14}; !slices.Equal(releasedAt, want) {
		t.Errorf("collected and returned memory on ticks %v, want %v", releasedAt, want)
	}
}

// TestIdleReleaseReturnsAStormsMemory: the collector as the daemon makes
// it (Go's own heap readings, debug.FreeOSMemory), told of a storm of
// streams, returns to the OS the free memory a storm left, which Go
// itself keeps: the free spans it holds fall by nearly all of 256 MiB.
func TestIdleReleaseReturnsAStormsMemory(t *testing.T) {
	// A goal far above the live heap, as 10,000 proxies' stacks make the
	// bridge's: Go's own scavenger then keeps the free spans (in a small
	// test heap it would return them itself).
	defer debug.SetGCPercent(debug.SetGCPercent(100000))
	garbage := make([][]byte, 0, 256<<10)
	for range 256 << 10 {
		garbage = append(garbage, make([]byte, 1<<10))
	}
	runtime.KeepAlive(garbage)
	garbage = nil
	runtime.GC() // the storm's objects are now free spans Go keeps
	freeHeld := func() uint64 {
		s := []rtmetrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
		rtmetrics.Read(s)
		return s[0].Value.Uint64()
	}
	before := freeHeld()
	if before < 32<<20 {
		t.Skipf("only %d bytes of free spans held after the storm; Go returned them itself", before)
	}
	clock := clockwork.NewFakeClock()
	var opened atomic.Uint64 // none at the start, then a storm
	var released atomic.Int32
	c := newIdleCollector(zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel), clock, func() time.Duration { return 0 }, func() (bool, uint64) { return false, 0 },
		func() (int, uint64) { return int(opened.Load()), opened.Load() }, func() {}, func() { released.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.run(ctx)
	if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	opened.Store(1000)
	deadline := time.Now().Add(10 * time.Second)
	for released.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no release after a storm of 1,000 streams (free spans held: %d bytes before, %d now)", before, freeHeld())
		}
		clock.Advance(idleInterval) // the storm's tick, then quiet ones
		time.Sleep(20 * time.Millisecond)
	}
	after := freeHeld()
	t.Logf("free spans held: %d bytes before the release, %d after", before, after)
	if after > before/16 {
		t.Errorf("free spans held: %d bytes before the release, %d after; want all but a sixteenth returned", before, after)
	}
}
