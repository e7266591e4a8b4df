package bridge

import (
	"math"
	"time"
)

// debounce decides when a change is built. Its window is the least time
// between two builds, and it never makes a change wait for nothing:
//
//   - a change that arrives a window or more after the last build builds
//     at once; while changes are calm the window is zero, so every change
//     builds at once (the loop still lets the previous build's fan-out to
//     the proxies end first: fanwait.go);
//   - the window grows toward debounce_hold_off only under sustained
//     churn, measured as changes per second (a rate that decays over
//     churnSpan), not as the CPU spent since the last build: that CPU
//     includes whatever else the bridge did meanwhile (the idle
//     collector, Consul reads, proxies' ACKs), and made back-to-back
//     changes of a cheap world wait a whole hold-off (issue 40);
//   - changes within a window of a build coalesce until a window after
//     the latest one, capped at debounce_max_delay after the burst began.
//
// So builds are at least a window apart (at most one push per proxy per
// window), and under heavy churn the bridge behaves as with a fixed
// hold-off. It reads no clock: every call is told the time.
type debounce struct {
	holdOff, maxDelay time.Duration
	// fixed keeps the window at holdOff (xds.debounce_adaptive = false).
	fixed      bool
	burstStart time.Time // zero while no change waits
	lastBuild  time.Time
	// rate is the changes per second as of rateAt: each change adds
	// 1/churnSpan, and it decays by e^(-t/churnSpan), so a steady stream
	// of λ changes per second reads λ after a few churnSpans.
	rate   float64
	rateAt time.Time
}

const (
	// churnSpan is how long a change counts toward the churn rate.
	churnSpan = time.Second
	// calmPerHoldOff: up to this many changes per hold-off (50 per second
	// with the default 100 ms) the window is zero. Back-to-back changes,
	// each sent once the fleet holds the one before — a rolling deploy, a
	// flapping check — arrive at tens per second and must not wait; the
	// fan-out gate (fanwait.go) already keeps builds from overlapping.
	// From there the window grows linearly and reaches the hold-off at
	// twice this rate.
	calmPerHoldOff = 5
)

// decayedRate is the churn rate at now.
func (d *debounce) decayedRate(now time.Time) float64 {
	if d.rateAt.IsZero() {
		return 0
	}
	dt := now.Sub(d.rateAt)
	if dt <= 0 {
		return d.rate
	}
	return d.rate * math.Exp(-float64(dt)/float64(churnSpan))
}

// window is the current least spacing between builds at now.
func (d *debounce) window(now time.Time) time.Duration {
	if d.fixed {
		return d.holdOff
	}
	// Changes per hold-off, beyond the calm ones, as a share of the calm
	// ones: 0 at calmPerHoldOff, 1 (the whole hold-off) at twice that.
	perHoldOff := d.decayedRate(now) * d.holdOff.Seconds()
	over := (perHoldOff - calmPerHoldOff) / calmPerHoldOff
	if over <= 0 {
		return 0
	}
	return time.Duration(min(over, 1) * float64(d.holdOff))
}

// changed records a change at now and returns how long to wait before
// building.
func (d *debounce) changed(now time.Time) time.Duration {
	d.rate = d.decayedRate(now) + 1/churnSpan.Seconds()
	d.rateAt = now
	w := d.window(now)
	if d.burstStart.IsZero() {
		d.burstStart = now
		if now.Sub(d.lastBuild) >= w {
			return 0
		}
	}
	wait := min(w, d.burstStart.Add(d.maxDelay).Sub(now))
	return max(wait, d.lastBuild.Add(w).Sub(now), 0)
}

// built records a build at now: the burst is over.
func (d *debounce) built(now time.Time) {
	d.burstStart = time.Time{}
	d.lastBuild = now
}
