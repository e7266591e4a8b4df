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
// a fifth of the floor, 10 ms by default, well over a local agent's
// answer to a query it does not hold (about a millisecond). A remote
// agent slower than that is floored after every query, as before.
func blockedAfter(minInterval time.Duration) time.Duration { return minInterval / 5 }

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
