package consul

import "time"

// The floor between a view's queries (QueryOptions.MinInterval) is there
// so a key that keeps changing cannot make a view hammer Consul: when the
// data moved before the next query was even sent, Consul answers it at
// once, and without a floor the view would loop as fast as the network
// allows. A query that blocked — Consul held it until something changed —
// is the opposite case: the view was following a quiet key, and the
// change it returned is the first after a quiet period. Flooring the
// query after it only delays the next change: with back-to-back changes,
// each written once the fleet holds the one before, every change but the
// first waited for the 50 ms floor (issue 40). So the floor applies only
// after a query that did not block.

// blockedAfter is how long a query must have taken to count as blocked:
// a 25th of the floor, 2 ms by default (at least 1 ms), over a local
// agent's answer to a query it does not hold (well under a millisecond
// when idle). Back-to-back changes of a small fleet come 5–10 ms apart,
// so 10 ms (a fifth of the floor) floored most of them (S9 at N = 100,
// p50 18–54 ms with 10 ms, 7.5–9.7 ms with 2 ms, bench/README.md). An
// agent slower than that to answer is floored after every query, as
// before; a loaded one that answers a moved key in over 2 ms is not,
// and is then read at most once per answer it gives.
func blockedAfter(minInterval time.Duration) time.Duration {
	return max(minInterval/25, time.Millisecond)
}

// nextFloor returns the time the view's next query may start after one
// that started at start with waitIndex, answered after took: start +
// minInterval if it did not block, zero (at once) if it did. A first
// read (waitIndex 0) never blocks by design and is not a key that keeps
// changing.
func nextFloor(start time.Time, took time.Duration, waitIndex uint64, minInterval time.Duration) time.Time {
	if waitIndex == 0 || took >= blockedAfter(minInterval) {
		return time.Time{}
	}
	return start.Add(minInterval)
}
