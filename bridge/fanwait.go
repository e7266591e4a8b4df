package bridge

// A build that falls due while the last build's fan-out to the proxies is
// still running waits for that fan-out to end: building meanwhile would
// only compete with the sends for the same CPU, and the proxies still
// being answered would get the newer world right after anyway. So changes
// that arrive while a build is cheap build again as soon as the last
// fan-out ends, and a fan-out that takes long (many proxies) coalesces
// the changes that arrive during it into one build, without a window.
//
// A proxy that does not read holds its fan-out open (xds/serve/cache's
// fanout), so the wait is capped: a hold-off after the last build, the
// build goes ahead. With a fixed debounce (debounce_adaptive = false)
// the hold-off already spaces builds and nothing waits here.

// holdForFanout is called when the build timer fires; it reports whether
// the build waits for the fan-out, re-arming the timer for the cap.
func (l *loop) holdForFanout() bool {
	now := l.d.clock.Now()
	until := l.debounce.lastBuild.Add(l.debounce.holdOff)
	if l.debounce.fixed || !l.fanning() || !now.Before(until) {
		l.waitingFan = false
		return false
	}
	l.waitingFan = true
	l.arm(until.Sub(now))
	return true
}

// fanoutEnded is called when the server reports that no fan-out runs; it
// reports whether a build was waiting for that (and is now due).
func (l *loop) fanoutEnded() bool {
	if !l.waitingFan || l.fanning() {
		return false // a stale signal, or a newer fan-out began
	}
	l.waitingFan = false
	l.timer.Stop()
	return true
}
