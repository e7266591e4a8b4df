package serve

import "errors"

// errNoFirstRequest is what a stream's wait for its first request gets on
// its channel when the wait runs out (newFirstWaits).
var errNoFirstRequest = errors.New("no first request within the timeout")

// newFirstWaits is the streams waiting for their first request
// (firstRequestInterceptor), by the channel their read answers on: a wait
// that runs out gets errNoFirstRequest there, unless the read answered
// first (the channel has room for both).
func newFirstWaits() *endTimes[chan error] {
	return newEndTimes(func(got chan error) {
		select {
		case got <- errNoFirstRequest:
		default: // its read answered already
		}
	})
}
