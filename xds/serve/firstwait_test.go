package serve

import (
	"testing"
	"time"
)

// TestFirstWaitsEndEachAtItsOwnTime: one timer ends every wait that runs
// out, each at its own end (not all at the earliest's), never one whose
// first request came; and a storm's waits leave no map behind.
func TestFirstWaitsEndEachAtItsOwnTime(t *testing.T) {
	w := newFirstWaits()
	const timeout = 300 * time.Millisecond
	early, answered, late := make(chan error, 2), make(chan error, 2), make(chan error, 2)
	start := time.Now()
	w.add(early, timeout)
	w.add(answered, timeout)
	time.Sleep(150 * time.Millisecond)
	w.add(late, timeout)
	w.remove(answered) // its first request came
	ended := func(got chan error) time.Duration {
		select {
		case err := <-got:
			if err != errNoFirstRequest {
				t.Fatalf("a wait ended with %v", err)
			}
			return time.Since(start)
		case <-time.After(3 * time.Second):
			t.Fatal("a wait never ended")
			return 0
		}
	}
	// Lower bounds are the point; upper ones allow a loaded machine.
	if d := ended(early); d < 300*time.Millisecond || d > 2*time.Second {
		t.Errorf("the first wait ended %v after it started, want from 300 ms", d)
	}
	if d := ended(late); d < 450*time.Millisecond || d > 2500*time.Millisecond {
		t.Errorf("the later wait ended %v after the first started, want from 450 ms (its own end)", d)
	}
	select {
	case err := <-answered:
		t.Errorf("a wait whose first request came was ended: %v", err)
	case <-time.After(100 * time.Millisecond):
	}

	storm := make([]chan error, 100)
	for i := range storm {
		storm[i] = make(chan error, 2)
		w.add(storm[i], timeout)
	}
	for _, got := range storm {
		w.remove(got)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.peak != 0 || len(w.ends) != 0 {
		t.Errorf("after a storm's waits: %d left, peak %d; want a fresh map", len(w.ends), w.peak)
	}
}
