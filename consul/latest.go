package consul

import "time"

// publishLatest hands u to a watcher's one-slot updates channel, replacing
// an update nobody took yet (the consumer only ever wants the newest). The
// change time kept is the earlier one, so "since the Consul change" is
// measured from the first change the consumer has not seen. Only the
// watcher's own goroutine sends, so the send never blocks.
func publishLatest[U any](updates chan U, u U, changedAt func(*U) *time.Time) {
	select {
	case old := <-updates:
		if at := changedAt(&old); at.Before(*changedAt(&u)) {
			*changedAt(&u) = *at
		}
	default:
	}
	updates <- u
}
