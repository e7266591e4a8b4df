package serve

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// TestStuckStreamsLoseTheirSlotAfterTheHold: a stream that never
// completes its sync frees its slot once its hold runs out, each hold
// from when it was taken, through the one timer; a stream that synced
// (released) is not released again when its hold would have run out.
func TestStuckStreamsLoseTheirSlotAfterTheHold(t *testing.T) {
	a := newAdmission(2, newMetrics(prometheus.NewRegistry(), zerolog.Nop()))
	a.hold = 300 * time.Millisecond
	ctx := context.Background()
	stuck1, synced, stuck2, waiter := streamKey{id: 1}, streamKey{id: 2}, streamKey{id: 3}, streamKey{id: 4}
	if err := a.admit(ctx, stuck1); err != nil {
		t.Fatal(err)
	}
	if err := a.admit(ctx, synced); err != nil {
		t.Fatal(err)
	}
	a.release(synced)
	time.Sleep(100 * time.Millisecond)
	if err := a.admit(ctx, stuck2); err != nil { // its hold ends 100 ms after stuck1's
		t.Fatal(err)
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := a.admit(wctx, waiter); err != nil {
		t.Fatalf("a slot held by a stuck stream was never freed: %v", err)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond || waited > 2*time.Second {
		t.Errorf("the first stuck stream's slot came free after %v, want its hold's end (~200 ms)", waited)
	}
	if a.holds(stuck1) || !a.holds(stuck2) {
		t.Errorf("after the first hold ran out: stuck1 holds %v, stuck2 holds %v; want false, true", a.holds(stuck1), a.holds(stuck2))
	}
	time.Sleep(250 * time.Millisecond)
	if a.holds(stuck2) {
		t.Error("the second stuck stream kept its slot past its hold")
	}
	if n := len(a.slots); n != 1 { // the waiter's
		t.Errorf("%d slots taken, want 1 (a release counted twice frees a slot no stream held)", n)
	}
}
