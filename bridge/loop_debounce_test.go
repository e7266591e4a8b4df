package bridge

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
)

// The daemon loop's debounce with the default (adaptive) settings, on a
// fake clock: a build that happens "at once" happens without the clock
// moving at all, so these tests measure waits exactly and never depend
// on how loaded the machine is.

// TestLoopQuietChangeBuildsAtOnce: after a second of churn that widened
// the window to the hold-off, a change after a quiet second is built
// with zero wait, and logged as having waited 0.
func TestLoopQuietChangeBuildsAtOnce(t *testing.T) {
	logs := &syncbuffer.Buffer{}
	h := startLoopWith(t, func(c *Config, _ *loop) { c.Logger = zerolog.New(logs) })
	h.send(8000)
	h.eventually("the first build", func() bool { return h.builds() == 1 })
	// Churn: 1000 changes 1 ms apart. A second later the rate still
	// reads ~230 changes/s (the window is still the whole hold-off), so
	// only the quiet second itself lets the next change build at once.
	for i := range 1000 {
		h.clock.Advance(time.Millisecond)
		h.send(9000 + i)
	}
	h.clock.Advance(time.Second) // the churn's last build falls due, then quiet
	h.eventually("the churn's last build", func() bool { return strings.Contains(h.served(), `"port_value":9999`) })
	before := h.builds()
	h.clock.Advance(time.Second)
	h.send(8001)
	h.eventually("the quiet change's build, with the clock standing still", func() bool {
		return h.builds() == before+1 && strings.Contains(h.served(), `"port_value":8001`)
	})
	evs := logEvents(logs, "snapshot updated")
	if w := evs[len(evs)-1]["waited"]; w != 0.0 {
		t.Errorf("the change after a quiet second waited %v ms, want 0", w)
	}
}

// TestLoopBackToBackChangesDoNotWait: changes 20 ms apart for a second
// (each as soon as the previous one's fan-out ended: no proxy here) are
// each built when they arrive, never a hold-off later (issue 40: ~100 ms).
func TestLoopBackToBackChangesDoNotWait(t *testing.T) {
	h := startLoop(t)
	h.send(8000)
	h.eventually("the first build", func() bool { return h.builds() == 1 })
	for i := range 50 {
		h.clock.Advance(20 * time.Millisecond)
		port := 9000 + i
		h.send(port)
		want := `"port_value":` + strconv.Itoa(port)
		h.eventually("change "+strconv.Itoa(i)+" built with the clock standing still", func() bool {
			return strings.Contains(h.served(), want)
		})
	}
	if got := h.builds(); got != 51 {
		t.Errorf("%v builds for 51 changes 20 ms apart, want one each", got)
	}
}

// TestLoopSustainedChurnCoalesces: 2 s of a change every millisecond
// builds far less often than it changes, and the newest catalog is served
// once the churn stops.
func TestLoopSustainedChurnCoalesces(t *testing.T) {
	h := startLoop(t)
	h.send(8000)
	h.eventually("the first build", func() bool { return h.builds() == 1 })
	for i := range 2000 {
		h.clock.Advance(time.Millisecond)
		h.send(10000 + i)
	}
	h.clock.Advance(time.Second)
	h.eventually("the newest catalog served", func() bool { return strings.Contains(h.served(), `"port_value":11999`) })
	// Calm until ~50 changes counted (each built at once), then the
	// window grows to the hold-off; a stream that never pauses builds
	// every max delay (1 s).
	if got := h.builds(); got > 80 {
		t.Errorf("%v builds for 2000 changes in 2 s, want the churn coalesced (≤ 80)", got)
	}
}

// TestLoopBuildWaitsForFanout: a change that arrives while the last
// build's fan-out runs is built the moment it ends (the clock standing
// still), and a fan-out that never ends (a proxy that does not read)
// holds a build for at most a hold-off after the last build.
func TestLoopBuildWaitsForFanout(t *testing.T) {
	var fanning atomic.Bool
	idle := make(chan struct{}, 1)
	h := startLoopWith(t, func(_ *Config, l *loop) {
		l.fanning, l.fanIdle = fanning.Load, idle
	})
	holdOff := h.d.cfg.Settings.XDS.DebounceHoldOff
	h.send(8000)
	h.eventually("the first build", func() bool { return h.builds() == 1 })

	fanning.Store(true) // the first build's fan-out runs
	h.clock.Advance(10 * time.Millisecond)
	h.send(8001)
	armed, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.clock.BlockUntilContext(armed, 1); err != nil {
		t.Fatalf("no timer armed for the fan-out's cap: %v", err)
	}
	if got := h.attempts.Load(); got != 1 {
		t.Fatalf("%d builds while the fan-out runs, want still 1", got)
	}
	fanning.Store(false)
	idle <- struct{}{}
	h.eventually("the build once the fan-out ended", func() bool { return strings.Contains(h.served(), `"port_value":8001`) })

	// A fan-out that never ends: the change waits out the cap only.
	fanning.Store(true)
	h.clock.Advance(10 * time.Millisecond)
	h.send(8002)
	if err := h.clock.BlockUntilContext(armed, 1); err != nil {
		t.Fatalf("no timer armed for the fan-out's cap: %v", err)
	}
	h.clock.Advance(holdOff - 10*time.Millisecond - time.Microsecond)
	time.Sleep(20 * time.Millisecond) // a build that should not come would show
	if got := h.attempts.Load(); got != 2 {
		t.Fatalf("%d builds before the cap, want 2", got)
	}
	h.clock.Advance(time.Microsecond)
	h.eventually("the build at the cap", func() bool { return strings.Contains(h.served(), `"port_value":8002`) })

	// After a quiet hold-off a stuck fan-out holds nothing back.
	h.clock.Advance(holdOff)
	h.send(8003)
	h.eventually("the quiet change built at once despite the stuck fan-out", func() bool {
		return strings.Contains(h.served(), `"port_value":8003`)
	})
}
