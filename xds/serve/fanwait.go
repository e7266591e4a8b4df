package serve

import "sync/atomic"

// openFanouts counts the updates whose fan-out to the proxies has begun and
// not yet ended (cache.Config.FanStarted and Fanned), so the daemon can
// build the next change as soon as the last fan-out ends rather than after
// a fixed hold-off (bridge/fanwait.go).
type openFanouts struct {
	open atomic.Int64
	// idle receives (without blocking the sender) when open drops to 0.
	idle chan struct{}
}

func newOpenFanouts() *openFanouts { return &openFanouts{idle: make(chan struct{}, 1)} }

func (f *openFanouts) started() { f.open.Add(1) }

// ended may run under the cache's lock: it never blocks.
func (f *openFanouts) ended() {
	if f.open.Add(-1) == 0 {
		select {
		case f.idle <- struct{}{}:
		default:
		}
	}
}

// FanningOut reports whether some update's fan-out to the proxies is
// still running: an answer not yet handed to gRPC.
func (s *Server) FanningOut() bool { return s.fans.open.Load() > 0 }

// FanoutIdle receives when the last running fan-out ends. A receive may
// be stale (a newer fan-out began since): check FanningOut after it.
func (s *Server) FanoutIdle() <-chan struct{} { return s.fans.idle }
