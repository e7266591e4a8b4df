package bridge

import "time"

// debounce decides when a change is built. A change after a quiet period
// (no build for a hold-off) builds at once: a lone health flip should not
// wait for a burst that is not coming. Changes within a hold-off of a
// build coalesce until a hold-off after the latest one, capped at maxDelay
// after the burst began. Builds are therefore at least a hold-off apart:
// at most one push per proxy per window. It reads no clock: every call is
// told the time.
type debounce struct {
	holdOff, maxDelay time.Duration
	burstStart        time.Time // zero while no change waits
	lastBuild         time.Time
}

// changed records a change at now and returns how long to wait before
// building.
func (d *debounce) changed(now time.Time) time.Duration {
	if d.burstStart.IsZero() {
		d.burstStart = now
		if now.Sub(d.lastBuild) >= d.holdOff {
			return 0
		}
	}
	wait := min(d.holdOff, d.burstStart.Add(d.maxDelay).Sub(now))
	return max(wait, d.lastBuild.Add(d.holdOff).Sub(now), 0)
}

// built records a build at now: the burst is over.
func (d *debounce) built(now time.Time) {
	d.burstStart = time.Time{}
	d.lastBuild = now
}
