package consul

import "time"

// publishLatest hands u to a watcher's one-slot updates channel, replacing
// an update nobody took yet (the consumer only ever wants the newest). The
// change time kept is the earlier one, so "since the Consul change" is
// measured from the first change the consumer has not seen. Only the
// watcher's own goroutine sends, so the send never blocks.
func publishLatest[U any](updates chan U, u U, changedAt func(*U) *time.Time) {
	publishMerged(updates, u, func(old, u *U) { *changedAt(u) = minTime(*changedAt(old), *changedAt(u)) })
}

// publishMerged is publishLatest with the folding of an untaken update
// into u spelled out by merge.
func publishMerged[U any](updates chan U, u U, merge func(old, u *U)) {
	select {
	case old := <-updates:
		merge(&old, &u)
	default:
	}
	updates <- u
}

// minTime is the earlier of two times.
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
