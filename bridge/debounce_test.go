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
	t.Run("a burst after a build coalesces into one build", func(t *testing.T) {
		// The first change builds at once; the four within its hold-off
		// build once, a hold-off after the last of them.
		got := simulate(newDebounce(), []time.Duration{ms(1000), ms(1010), ms(1020), ms(1050), ms(1080)})
		if want := []time.Duration{ms(1000), ms(1180)}; !slices.Equal(got, want) {
			t.Errorf("builds at %v, want %v", got, want)
		}
	})
	t.Run("a continuous stream still builds every max delay", func(t *testing.T) {
		var changes []time.Duration
		for c := ms(1000); c < ms(6000); c += ms(10) {
			changes = append(changes, c)
		}
		got := simulate(newDebounce(), changes)
		if len(got) < 5 {
			t.Fatalf("%d builds in 5s of changes every 10ms, want one at least every max delay (1s): %v", len(got), got)
		}
		for i := 1; i < len(got); i++ {
			// The burst starts with the first change after a build (10ms
			// later) and is cut off max delay after that.
			if gap := got[i] - got[i-1]; i < len(got)-1 && (gap > maxDelay+ms(10) || gap < maxDelay) {
				t.Errorf("builds %v and %v are %v apart, want about max delay", got[i-1], got[i], gap)
			}
		}
		if last := got[len(got)-1]; last < ms(5990) {
			t.Errorf("last build at %v, before the last change (5.99s)", last)
		}
	})
	t.Run("builds are at least a hold-off apart", func(t *testing.T) {
		got := simulate(newDebounce(), []time.Duration{ms(1000), ms(1150), ms(1160)})
		if want := []time.Duration{ms(1000), ms(1150), ms(1260)}; !slices.Equal(got, want) {
			t.Errorf("builds at %v, want %v", got, want)
		}
	})
}
