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

// every lists changes from `from` (inclusive) to `to` (exclusive), gap apart.
func every(from, to, gap time.Duration) []time.Duration {
	var out []time.Duration
	for c := from; c < to; c += gap {
		out = append(out, c)
	}
	return out
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
	t.Run("back-to-back changes 25ms apart each build at once", func(t *testing.T) {
		// Issue 40: a flip sent as soon as the fleet holds the one before,
		// ~50 ms after a build, waited ~100 ms. 40 changes per second for
		// 3 s is calm: none waits.
		changes := every(ms(1000), ms(4000), ms(25))
		if got := simulate(newDebounce(), changes); !slices.Equal(got, changes) {
			t.Errorf("builds at %v, want one at each change %v", got, changes)
		}
	})
	t.Run("sustained churn coalesces toward the hold-off", func(t *testing.T) {
		changes := every(ms(1000), ms(4000), ms(1)) // 1000 changes per second
		got := simulate(newDebounce(), changes)
		// Until ~50 changes have counted, changes are calm and build at
		// once; from ~100 on, the window is the whole hold-off, and a
		// stream that never pauses for one builds every max delay.
		if len(got) > 60 {
			t.Fatalf("%d builds in 3s of changes every 1ms, want the window to grow to the hold-off", len(got))
		}
		for i := 1; i < len(got); i++ {
			if got[i] < ms(1200) {
				continue
			}
			if gap := got[i] - got[i-1]; gap < holdOff || gap > maxDelay+ms(1) {
				t.Errorf("builds at %v and %v are %v apart under full churn, want within [hold-off, max delay]", got[i-1], got[i], gap)
			}
		}
		if last := got[len(got)-1]; last < ms(3999) {
			t.Errorf("last build at %v, before the last change (3.999s)", last)
		}
	})
	t.Run("a change after a quiet second builds at once", func(t *testing.T) {
		d := newDebounce()
		simulate(d, every(ms(1000), ms(2000), ms(1))) // full churn: window = hold-off
		if w := d.window(time.Unix(1_000_000, 0).Add(ms(2000))); w != holdOff {
			t.Fatalf("window %v after a second of churn, want the hold-off %v", w, holdOff)
		}
		if got := simulate(d, []time.Duration{ms(3000)}); !slices.Equal(got, []time.Duration{ms(3000)}) {
			t.Errorf("builds at %v after a quiet second, want at once (3s)", got)
		}
	})
	t.Run("the window follows the churn rate", func(t *testing.T) {
		// A steady rate of r changes per second (decayed over churnSpan)
		// makes the window 0 up to 50/s, the hold-off from 100/s.
		for r, want := range map[int]time.Duration{10: 0, 45: 0, 75: holdOff / 2, 100: holdOff, 500: holdOff} {
			d := newDebounce()
			now := time.Unix(1_000_000, 0)
			d.rate, d.rateAt = float64(r), now
			if got := d.window(now); got < want-time.Millisecond || got > want+time.Millisecond {
				t.Errorf("%d changes/s: window %v, want %v", r, got, want)
			}
		}
	})
	t.Run("fixed: every change within the hold-off coalesces", func(t *testing.T) {
		d := newDebounce()
		d.fixed = true
		got := simulate(d, []time.Duration{ms(1000), ms(1020), ms(1040), ms(1060)})
		if want := []time.Duration{ms(1000), ms(1160)}; !slices.Equal(got, want) {
			t.Errorf("builds at %v, want %v (debounce_adaptive = false)", got, want)
		}
	})
}
