package bench

import (
	"testing"
	"time"
)

// TestPaceSpreadsOrBunches: floor-acks' sends come at each period's start
// (all of its streams at once) or, spread, stream k no sooner than k/n of
// the way through the period; every stream sends once a period.
func TestPaceSpreadsOrBunches(t *testing.T) {
	const n, rounds, period = 4, 3, 80 * time.Millisecond
	for _, spread := range []bool{false, true} {
		start := time.Now()
		var at [rounds][n]time.Duration
		calls := 0
		if err := pace(start, n, rounds, period, spread, func(k int) error {
			at[calls/n][k] = time.Since(start)
			calls++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if calls != n*rounds {
			t.Fatalf("spread %v: %d sends, want %d", spread, calls, n*rounds)
		}
		for r := range rounds {
			for k := range n {
				slot := time.Duration(r) * period
				if spread {
					slot += period * time.Duration(k) / n
				}
				if at[r][k] < slot {
					t.Errorf("spread %v: round %d stream %d sent at %v, before its slot %v", spread, r, k, at[r][k], slot)
				}
			}
			// Bunched, a round's last send follows its first at once
			// (a generous bound: the core may be busy).
			if !spread && at[r][n-1]-at[r][0] > period/2 {
				t.Errorf("round %d's sends spanned %v, want them at once", r, at[r][n-1]-at[r][0])
			}
		}
	}
}
