package bridge

import "time"

// debounce decides when a change is built. Its window is the least time
// between two builds:
//
//   - it follows what a build costs: twice the CPU the bridge spent since
//     the build before (the build, and the pushes to every proxy that
//     followed it), at least minWindow, so a quiet fleet gets each change
//     in milliseconds rather than a fixed hold-off later, and a large one
//     spends at most about half a core on pushes however fast Consul
//     changes;
//   - it doubles with each change that arrives inside the window (changes
//     faster than builds), up to debounce_hold_off, and is back to its
//     cost after a change arrives two windows after a build;
//   - a change after a quiet window builds at once; changes within a
//     window of a build coalesce until a window after the latest one,
//     capped at debounce_max_delay after the burst began.
//
// So builds are at least a window apart (at most one push per proxy per
// window), and under continuous churn the bridge behaves as with a fixed
// hold-off. It reads no clock: every call is told the time.
type debounce struct {
	holdOff, maxDelay time.Duration
	// fixed keeps the window at holdOff (xds.debounce_adaptive = false).
	fixed      bool
	burstStart time.Time // zero while no change waits
	lastBuild  time.Time
	cost       time.Duration // CPU of the last build-and-push cycle
	churn      uint          // doublings of the window
}

const (
	// minWindow is the floor of the window: below it, coalescing changes
	// that arrive together (one Consul write touching several services)
	// saves nothing.
	minWindow = 5 * time.Millisecond
	// costFactor: a window of twice a build's cost leaves the bridge idle
	// at least half the time under churn.
	costFactor = 2
	maxChurn   = 16
)

// window is the current least spacing between builds.
func (d *debounce) window() time.Duration {
	if d.fixed {
		return d.holdOff
	}
	w := max(minWindow, costFactor*d.cost)
	for range min(d.churn, maxChurn) {
		if w >= d.holdOff {
			break
		}
		w *= 2
	}
	return min(w, d.holdOff)
}

// changed records a change at now and returns how long to wait before
// building.
func (d *debounce) changed(now time.Time) time.Duration {
	if d.burstStart.IsZero() {
		d.burstStart = now
		since := now.Sub(d.lastBuild)
		switch w := d.window(); {
		case since >= 2*w:
			d.churn = 0
		case since < w:
			d.churn = min(d.churn+1, maxChurn)
		}
		if since >= d.window() {
			return 0
		}
	}
	w := d.window()
	wait := min(w, d.burstStart.Add(d.maxDelay).Sub(now))
	return max(wait, d.lastBuild.Add(w).Sub(now), 0)
}

// built records a build at now: the burst is over.
func (d *debounce) built(now time.Time) {
	d.burstStart = time.Time{}
	d.lastBuild = now
}

// measured records the CPU the last build and its pushes cost.
func (d *debounce) measured(cost time.Duration) { d.cost = cost }
