package bridge

import (
	"slices"
	"testing"
	"time"
)

// simulate runs changes (offsets from t0) through a debounce whose timer
// fires as the loop's does, and returns when builds happen.
func simulate(d *debounce, changes []time.Duration) []time.Duration {
	t0 := time.Unix(1_000_000, 0)
	var builds []time.Duration
	var deadline *time.Duration
	fire := func(upTo time.Duration) {
		for deadline != nil && *deadline <= upTo {
			at := *deadline
			deadline = nil
			d.built(t0.Add(at))
			builds = append(builds, at)
		}
	}
	for _, c := range changes {
		fire(c)
		at := c + d.changed(t0.Add(c))
		deadline = &at
		fire(c) // a zero wait builds before the next change is read
	}
	fire(changes[len(changes)-1] + time.Hour)
	return builds
}

func TestDebounce(t *testing.T) {
	const holdOff, maxDelay = 100 * time.Millisecond, time.Second
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	newDebounce := func() *debounce { return &debounce{holdOff: holdOff, maxDelay: maxDelay} }

	t.Run("a lone change builds at once", func(t *testing.T) {
		if got := simulate(newDebounce(), []time.Duration{ms(5000)}); len(got) != 1 || got[0] != ms(5000) {
			t.Errorf("builds at %v, want one at 5s", got)
		}
	})
	t.Run("cheap builds: changes 20ms apart each build at once", func(t *testing.T) {
		got := simulate(newDebounce(), []time.Duration{ms(1000), ms(1020), ms(1040), ms(1060)})
		if want := []time.Duration{ms(1000), ms(1020), ms(1040), ms(1060)}; !slices.Equal(got, want) {
			t.Errorf("builds at %v, want %v (a fixed 100ms hold-off would have delayed all but the first)", got, want)
		}
	})
	t.Run("a burst inside the window coalesces into one build", func(t *testing.T) {
		// The first change builds at once; the three within its 5ms
		// window double it and build once, a window after the last.
		got := simulate(newDebounce(), []time.Duration{ms(1000), ms(1001), ms(1002), ms(1003)})
		if want := []time.Duration{ms(1000), ms(1013)}; !slices.Equal(got, want) {
			t.Errorf("builds at %v, want %v", got, want)
		}
	})
	t.Run("costly builds widen the window", func(t *testing.T) {
		d := newDebounce()
		d.measured(ms(30)) // window 60ms
		got := simulate(d, []time.Duration{ms(1000), ms(1040)})
		if want := []time.Duration{ms(1000), ms(1140)}; !slices.Equal(got, want) {
			t.Errorf("builds at %v, want %v (inside the 60ms window: doubled, capped at the 100ms hold-off)", got, want)
		}
	})
	t.Run("continuous churn builds at most every max delay, never closer than the window", func(t *testing.T) {
		var changes []time.Duration
		for c := ms(1000); c < ms(4000); c += ms(1) {
			changes = append(changes, c)
		}
		got := simulate(newDebounce(), changes)
		if len(got) > 8 {
			t.Fatalf("%d builds in 3s of changes every 1ms, want the window to grow to the hold-off: %v", len(got), got)
		}
		for i := 1; i < len(got)-1; i++ {
			if gap := got[i] - got[i-1]; gap > maxDelay+ms(10) || gap < minWindow {
				t.Errorf("builds %v and %v are %v apart, want within [window, max delay]", got[i-1], got[i], gap)
			}
		}
		if last := got[len(got)-1]; last < ms(3999) {
			t.Errorf("last build at %v, before the last change (3.999s)", last)
		}
	})
	t.Run("the window returns to its cost after a quiet gap", func(t *testing.T) {
		d := newDebounce()
		simulate(d, []time.Duration{ms(1000), ms(1001), ms(1002)}) // churn: window 10ms
		if got := simulate(d, []time.Duration{ms(2000), ms(2020)}); !slices.Equal(got, []time.Duration{ms(2000), ms(2020)}) {
			t.Errorf("builds at %v after a quiet second, want each at once", got)
		}
	})
}
