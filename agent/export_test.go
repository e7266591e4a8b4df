package agent

import "time"

// SetEnvoyParentGrace shortens envoyParentGrace for a test; the returned
// func restores it.
func SetEnvoyParentGrace(d time.Duration) func() {
	was := envoyParentGrace
	envoyParentGrace = d
	return func() { envoyParentGrace = was }
}

// IdleRelays counts the relays lingering with no local proxy.
func (a *Agent) IdleRelays() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, r := range a.relays {
		if r.idle() {
			n++
		}
	}
	return n
}
