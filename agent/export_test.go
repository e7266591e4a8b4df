package agent

import "time"

// SetEnvoyParentGrace shortens envoyParentGrace for a test; the returned
// func restores it.
func SetEnvoyParentGrace(d time.Duration) func() {
	was := envoyParentGrace
	envoyParentGrace = d
	return func() { envoyParentGrace = was }
}
