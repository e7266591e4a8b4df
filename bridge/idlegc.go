package bridge

import (
	"context"
	"runtime"
	rtmetrics "runtime/metrics"
	"time"

	"github.com/jonboulle/clockwork"
)

// Collecting garbage while idle (xds.collect_when_idle).
//
// Go starts a collection when the heap reaches its goal, and a change's
// fan-out allocates more than anything else the bridge does, so that is
// mostly during a fan-out. On a busy core the collection's mark phase
// then slows the fan-out for its length: with 1,000 proxies, one health
// flip in ~16 reached its last proxy ~50 ms later (S1, bench/README.md).
// When the process has been idle for an interval, no change is waiting
// for its build, and what is left before
// the earliest point Go may start its next collection would not hold two
// more of the last busy period's allocations, the bridge collects itself,
// once per idle spell, so that the next change finds the heap far from
// its goal. The collection would have come within the next two fan-outs
// anyway; now it runs in time nothing else wanted. Under continuous churn
// the process is never idle and nothing changes.

// idleInterval is how often the collector looks, and how long the process
// must have been idle (under a tenth of a core) before it collects.
const idleInterval = 100 * time.Millisecond

// heapState is what the decision reads of the heap, in bytes.
type heapState struct {
	objects uint64 // in objects now, garbage included
	live    uint64 // live after the last collection
	goal    uint64 // the heap size the next collection aims to end by
	allocs  uint64 // allocated since the process started
}

// earliestTrigger is where Go's pacer may start a collection at the
// soonest: it starts the mark phase between 70 % and 95 % of the way from
// the live heap to the goal (runtime/mgcpacer.go's trigger bounds).
func (h heapState) earliestTrigger() uint64 { return h.live + (h.goal-h.live)*7/10 }

// idle reports whether an interval that used cpu was idle.
func idle(cpu, interval time.Duration) bool { return cpu*10 < interval }

// collectDue reports whether to collect after an idle interval: what is
// left before the earliest trigger would not hold two more bursts of
// burst bytes (and no collection is under way: the heap is under its
// goal).
func collectDue(h heapState, burst uint64) bool {
	if burst == 0 || h.goal <= h.live || h.objects >= h.goal {
		return false
	}
	return h.objects+2*burst > h.earliestTrigger()
}

// idleCollector runs the decision every idleInterval; cpu, heap and
// collect are processCPU, readHeap and runtime.GC outside tests.
type idleCollector struct {
	clock   clockwork.Clock
	cpu     func() time.Duration
	heap    func() heapState
	collect func()
	// pending reports a change waiting to be built (the daemon loop's).
	pending func() bool
	// collected counts the collections it started (metrics).
	collected func()
}

func newIdleCollector(clock clockwork.Clock, pending func() bool, collected func()) *idleCollector {
	return &idleCollector{clock: clock, cpu: processCPU, heap: readHeap, collect: runtime.GC, pending: pending, collected: collected}
}

func (c *idleCollector) run(ctx context.Context) {
	t := c.clock.NewTicker(idleInterval)
	defer t.Stop()
	lastCPU, lastAllocs := c.cpu(), c.heap().allocs
	// busy sums what busy intervals allocated since the last idle one;
	// burst is the last such sum, what the next busy period may need.
	var busy, burst uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		cpu, h := c.cpu(), c.heap()
		// A change waiting for its build (the debounce window) is work
		// about to start: a collection now would meet its fan-out.
		if !idle(cpu-lastCPU, idleInterval) || c.pending() {
			busy += h.allocs - lastAllocs
		} else {
			if busy > 0 {
				burst, busy = busy, 0
			}
			if collectDue(h, burst) {
				c.collect()
				c.collected()
				cpu = c.cpu() // the collection's own CPU is not work
				// Once per idle spell: a burst larger than the whole
				// headroom (a reconnect storm's) must not make every
				// idle tick collect again.
				burst = 0
			}
		}
		lastCPU, lastAllocs = cpu, h.allocs
	}
}

var heapSamples = []string{"/memory/classes/heap/objects:bytes", "/gc/heap/live:bytes", "/gc/heap/goal:bytes", "/gc/heap/allocs:bytes"}

func readHeap() heapState {
	s := make([]rtmetrics.Sample, len(heapSamples))
	for i, name := range heapSamples {
		s[i].Name = name
	}
	rtmetrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != rtmetrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return heapState{objects: v(0), live: v(1), goal: v(2), allocs: v(3)}
}
