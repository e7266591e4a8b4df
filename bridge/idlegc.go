package bridge

import (
	"context"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
)

// Collecting garbage while idle (xds.collect_when_idle).
//
// Go starts a collection when the heap nears its goal (the pacer's
// trigger), and a change's fan-out allocates more than anything else the
// bridge does, so that is mostly during a fan-out. On a busy core the collection's mark phase
// then slows the fan-out for its length: with 1,000 proxies, one health
// flip in ~16 reached its last proxy ~50 ms later (S1, bench/README.md).
// When the process has been idle for an interval, with no build pending,
// running or finished in it, and what is left before
// the earliest point Go may start its next collection would not hold two
// more of the last busy period's allocations (and a collection would free
// at least one of them, or half that room), the bridge collects itself,
// once per idle spell, so that the next change finds the heap far from
// its goal. The collection would have come within the next two fan-outs
// anyway; now it runs in time nothing else wanted. Under continuous churn
// the process is never idle and nothing changes.

// Returning what a storm left (the same setting). Go keeps the memory a
// collection frees for the heap to grow back into, up to ~1.1× its goal,
// and the goal counts goroutine stacks too: with 10,000 proxies it is
// over twice the live heap, so nothing is ever returned. After a fleet's
// connect or a reconnect storm that keeps tens of MiB the steady state
// never uses (S3 at N = 10,000: 28–34 MiB of free spans, 6–7 % of the
// RSS; a bare gRPC server holds none). A storm is told by its streams,
// not its bytes: once streams opened since the last look reach a tenth
// of those open (at least 100), the first idle interval in which no
// stream opened looks at the heap once and, if a collection would leave
// over an eighth of the heap's objects free (and at least 8 MiB),
// collects and returns the free memory (debug.FreeOSMemory) rather than
// only collecting. A change's fan-out opens no stream and never pays for
// it (the pages it would fault back in); a trickle of reconnects pays
// once per tenth of the fleet.

// releaseDue reports whether to collect and return the free memory.
func releaseDue(h heapState) bool {
	freeable := h.freeable()
	return freeable > h.objects/8 && freeable >= minRelease
}

// freeable is what a collection now would leave free: the free spans and
// the garbage. Right after a collection the objects may read a few bytes
// under the live estimate: no garbage, and the free spans all of it.
func (h heapState) freeable() uint64 {
	if h.objects < h.live {
		return h.free
	}
	return h.free + h.objects - h.live
}

// stormed reports whether opened streams since the last look make a
// storm among open ones.
func stormed(open int, opened uint64) bool {
	return opened >= max(minStormStreams, uint64(open)/10)
}

const (
	// minRelease: returning less is not worth a collection.
	minRelease = 8 << 20
	// minStormStreams: a small fleet's connect leaves little behind.
	minStormStreams = 100
)

// idleInterval is how often the collector looks, and how long the process
// must have been idle (under a tenth of a core) before it collects.
const idleInterval = 100 * time.Millisecond

// heapState is what the decision reads of the heap, in bytes.
type heapState struct {
	objects uint64 // in objects now, garbage included
	live    uint64 // live after the last collection
	goal    uint64 // the heap size the next collection aims to end by
	allocs  uint64 // allocated since the process started
	free    uint64 // free spans the process still holds (not returned)
}

// earliestTrigger is where Go's pacer may start a collection at the
// soonest: it starts the mark phase between 70 % and 95 % of the way from
// the live heap to the goal (runtime/mgcpacer.go's trigger bounds).
func (h heapState) earliestTrigger() uint64 { return h.live + (h.goal-h.live)/64*45 }

// idle reports whether an interval that used cpu was idle.
func idle(cpu, interval time.Duration) bool { return cpu*10 < interval }

// collectDue reports whether to collect after an idle interval: what is
// left before the earliest trigger would not hold two more bursts of
// burst bytes, a collection would free at least one burst or half the
// runway, whichever is less (not right after Go's own, nor under a
// memory limit that keeps the heap at its goal), and none is under way
// (the heap is under its goal).
func collectDue(h heapState, burst uint64) bool {
	if h.goal <= h.live || h.objects >= h.goal || h.objects <= h.live {
		return false
	}
	// A burst past the whole runway (a fleet's connect, a reconnect
	// storm) counts as the runway: the next such burst would meet a
	// collection anyway. Asking a collection to free a burst that large
	// would mean waiting until the heap is at the trigger, where Go may
	// already collect: a fleet's connect left 20 MiB of garbage 2 MiB
	// short of it, and the first change's fan-out met a 50 ms collection
	// (S1 flip 0). So a collection need free at most half the runway.
	runway := h.earliestTrigger() - h.live
	burst = min(burst, runway)
	if burst == 0 || h.objects-h.live < min(burst, runway/2) {
		return false
	}
	return h.objects+2*burst > h.earliestTrigger()
}

// idleCollector runs the decision every idleInterval; cpu, heap and
// collect are the daemon's CPU clock, readHeap and runtime.GC outside
// tests.
type idleCollector struct {
	clock   clockwork.Clock
	cpu     func() time.Duration
	heap    func() heapState
	collect func()
	// release collects and returns free memory to the OS
	// (debug.FreeOSMemory outside tests).
	release func()
	// streams reports how many xDS streams are open, and how many have
	// opened (the server's).
	streams func() (open int, opened uint64)
	// builds reports whether a change waits to be built or is being
	// built, and how many builds have run (the daemon loop's).
	builds func() (pending bool, done uint64)
	// collected counts the collections it started (metrics), released
	// those that also returned memory.
	collected, released func()
	log                 zerolog.Logger
}

func newIdleCollector(log zerolog.Logger, clock clockwork.Clock, cpu func() time.Duration, builds func() (bool, uint64), streams func() (int, uint64), collected, released func()) *idleCollector {
	return &idleCollector{log: log, clock: clock, cpu: cpu, heap: heapReader(), collect: runtime.GC, release: debug.FreeOSMemory,
		streams: streams, builds: builds, collected: collected, released: released}
}

func (c *idleCollector) run(ctx context.Context) {
	lastCPU, lastAllocs := c.cpu(), c.heap().allocs
	_, lastBuilds := c.builds()
	// lastOpened is the streams opened at the last look after a storm,
	// tickOpened at the last tick.
	_, lastOpened := c.streams()
	tickOpened := lastOpened
	// The ticker after the first readings: whoever waits for it (a test
	// on a fake clock) knows they were taken, and a storm after it
	// counts (a stress run once read the storm's streams as the baseline).
	t := c.clock.NewTicker(idleInterval)
	defer t.Stop()
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
		open, opened := c.streams()
		// A storm is over when an interval opened no stream: a look
		// while the fleet's last proxies still connect would see a heap
		// the rest of the storm is still filling (and spend the look).
		quiet := opened == tickOpened
		tickOpened = opened
		// A change waiting for its build (the debounce window) is work
		// about to start, and a build since the last look means its
		// fan-out is under way: a collection now would meet it.
		pending, builds := c.builds()
		built := builds != lastBuilds
		lastBuilds = builds
		if !idle(cpu-lastCPU, idleInterval) || pending || built {
			busy += h.allocs - lastAllocs
		} else {
			if busy > 0 {
				burst, busy = busy, 0
			}
			release := false
			if quiet && stormed(open, opened-lastOpened) {
				release = releaseDue(h)
				c.log.Debug().Int("streams_open", open).Uint64("streams_opened", opened-lastOpened).
					Uint64("heap_objects_bytes", h.objects).Uint64("heap_live_bytes", h.live).Uint64("heap_free_bytes", h.free).
					Bool("release", release).Msg("idle after a storm of streams: looked at the heap")
				lastOpened = opened // one look per storm
			}
			if release || collectDue(h, burst) {
				if release {
					t0 := c.clock.Now()
					c.release()
					c.released()
					c.log.Info().Int("streams_open", open).Uint64("heap_freeable_bytes", h.freeable()).
						Dur("took", c.clock.Since(t0)).
						Msg("idle after a storm of streams: collected and returned free memory to the OS")
				} else {
					c.collect()
				}
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

var heapSamples = []string{"/memory/classes/heap/objects:bytes", "/gc/heap/live:bytes", "/gc/heap/goal:bytes", "/gc/heap/allocs:bytes", "/memory/classes/heap/free:bytes"}

// heapReader returns a reader of the heap's state that reuses its
// samples, for one goroutine: the collector reads every 100 ms for the
// process's life and should not itself allocate while idle.
func heapReader() func() heapState {
	s := make([]rtmetrics.Sample, len(heapSamples))
	for i, name := range heapSamples {
		s[i].Name = name
	}
	v := func(i int) uint64 {
		if s[i].Value.Kind() != rtmetrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return func() heapState {
		rtmetrics.Read(s)
		return heapState{objects: v(0), live: v(1), goal: v(2), allocs: v(3), free: v(4)}
	}
}
