package serve

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
)

// A fan-out's turns run once each, on a bounded
// number of goroutines (a goroutine per turn would run all 1000 at once),
// and the workers beyond min leave when no turn waits.
func TestSendPoolRunsEachTurnOnceOnFewGoroutines(t *testing.T) {
	p := newSendPool(clockwork.NewFakeClock(), nil) // no worker is ever counted stuck
	defer p.stop()
	const n = 1000
	release := make(chan struct{})
	var mu sync.Mutex
	var started []int
	var running, peak atomic.Int64
	var done sync.WaitGroup
	done.Add(n)
	for i := range n {
		p.Go(func() {
			defer done.Done()
			mu.Lock()
			started = append(started, i)
			mu.Unlock()
			if r := running.Add(1); r > peak.Load() {
				peak.Store(r)
			}
			<-release
			running.Add(-1)
		})
	}
	// Every worker is now in a turn that waits for release.
	waitUntil(t, "workers to take turns", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.busy) == p.counted && p.counted > 0
	})
	if r := running.Load(); r > maxSendWorkers || r >= n {
		t.Fatalf("%d turns ran at once, want at most %d workers", r, maxSendWorkers)
	}
	close(release)
	done.Wait()
	// Workers take turns in order, but a worker may be descheduled
	// between taking its turn and recording it, so only once-each is
	// asserted here (a stream's own answers are ordered by its outbox).
	seen := map[int]bool{}
	for _, i := range started {
		if seen[i] {
			t.Fatalf("turn %d ran twice", i)
		}
		seen[i] = true
	}
	if len(started) != n {
		t.Fatalf("%d turns ran, want %d", len(started), n)
	}
	if peak.Load() > maxSendWorkers {
		t.Fatalf("%d turns at once, want at most %d", peak.Load(), maxSendWorkers)
	}
	waitUntil(t, "the extra workers to leave", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.counted == p.min
	})
}

// A worker whose turn blocks (a client that does not read) stops counting
// once its turn has lasted stuckAfter: the turns behind it run on another,
// and the blocked one is counted.
func TestSendPoolGoesOnPastABlockedSend(t *testing.T) {
	clock := clockwork.NewFakeClock()
	var blocked atomic.Int64
	p := newSendPool(clock, func() { blocked.Add(1) })
	defer p.stop()
	stuck := occupyWorkers(t, p)
	defer close(stuck)
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	select {
	case <-ran:
		t.Fatal("a turn ran while every worker was busy and none had been for stuckAfter")
	case <-time.After(50 * time.Millisecond):
	}
	clock.Advance(defaultStuckAfter)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the turn behind blocked sends did not run once they had lasted stuckAfter")
	}
	if got := blocked.Load(); got != int64(p.min) {
		t.Fatalf("%d blocked sends counted, want %d", got, p.min)
	}
}

// Workers replaced after blocking may meet clients that do not read too:
// the pool keeps looking while turns wait, wave after wave.
func TestSendPoolGoesOnPastWavesOfBlockedSends(t *testing.T) {
	clock := clockwork.NewFakeClock()
	p := newSendPool(clock, nil)
	defer p.stop()
	stuck := make(chan struct{})
	defer close(stuck)
	for range 3 * p.min {
		p.Go(func() { <-stuck })
	}
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	for i := 0; ; i++ {
		waitUntil(t, "every worker to be in a turn", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return len(p.busy) == p.counted && p.checkAt || p.waitingLocked() == 0
		})
		select {
		case <-ran:
			return
		default:
		}
		if i == 5 {
			t.Fatal("a turn behind three waves of blocked sends did not run")
		}
		clock.Advance(defaultStuckAfter)
		select {
		case <-ran:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A worker woken for a turn counts as taken at once: a burst of turns
// given to one waiting worker starts others or looks for stuck ones.
func TestSendPoolDoesNotCountAWokenWorkerTwice(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	clock := clockwork.NewFakeClock()
	p := newSendPool(clock, nil)
	defer p.stop()
	for range p.min {
		p.Go(func() {})
	}
	waitUntil(t, "the workers to wait", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.idle == p.min
	})
	stuck := make(chan struct{})
	defer close(stuck)
	for range p.min {
		p.Go(func() { <-stuck })
	}
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	for range 5 {
		select {
		case <-ran:
			return
		case <-time.After(20 * time.Millisecond):
		}
		clock.Advance(defaultStuckAfter)
	}
	t.Fatal("a turn given with every waiting worker already woken did not run")
}

// After stop the turns already given run, the workers leave, and a turn
// given later still runs (a stream ending with the server).
func TestSendPoolStops(t *testing.T) {
	p := newSendPool(clockwork.NewRealClock(), nil)
	release := make(chan struct{})
	var queued atomic.Int64
	for range 3 * p.min { // more than the workers: some wait in the queue
		p.Go(func() { <-release; queued.Add(1) })
	}
	p.stop()
	close(release)
	waitUntil(t, "the turns given before stop to run", func() bool { return queued.Load() == int64(3*p.min) })
	waitUntil(t, "the workers to leave", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.counted == 0
	})
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("a turn given after stop did not run")
	}
}

// An update's answers go to the pool; an answer to a request (no
// fan-out) gets a goroutine of its own, so it does not wait behind the
// pool's busy workers.
func TestOnlyUpdatesUseThePool(t *testing.T) {
	p := newSendPool(clockwork.NewFakeClock(), nil) // no worker is ever counted stuck
	defer p.stop()
	stuck := occupyWorkers(t, p)
	sent := make(chan int64, 2)
	o := newOutbox[*cache.DeltaResponse]()
	o.start(context.Background(), func(_ *cache.DeltaResponse, nonce int64) error { sent <- nonce; return nil }, p)
	o.push(&cache.DeltaResponse{}) // a request's answer
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("an answer to a request waited for the pool's workers")
	}
	waitUntil(t, "the first turn to end", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return !o.sending
	})
	o.push(updateAnswers(t, 1, func(time.Duration) {})[0].(*cache.DeltaResponse)) // an update's
	select {
	case <-sent:
		t.Fatal("an update's answer went out while every worker of the pool was busy")
	case <-time.After(50 * time.Millisecond):
	}
	close(stuck)
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("an update's answer did not go out once the pool's workers were free")
	}
}

// occupyWorkers gives each of p's min workers a turn that blocks until
// the returned channel is closed, and waits until all are in it.
func occupyWorkers(t *testing.T, p *sendPool) chan struct{} {
	t.Helper()
	stuck := make(chan struct{})
	for range p.min {
		p.Go(func() { <-stuck })
	}
	waitUntil(t, "every worker to be in a blocked turn", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.busy) == p.min
	})
	return stuck
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The server's pool counts a send left blocked in the metric docs/reference/admin-http.md
// lists.
func TestBlockedSendsAreAMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := startServer(t, ServerConfig{Registerer: reg})
	s.senders.detached() // as its pool does when it leaves a worker to a blocked send
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "consul_xds_bridge_blocked_sends_total" {
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 1 {
				t.Fatalf("consul_xds_bridge_blocked_sends_total = %v, want 1", v)
			}
			return
		}
	}
	t.Fatal("consul_xds_bridge_blocked_sends_total is not registered")
}
