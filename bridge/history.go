package bridge

import (
	"context"
	"sync"
	"time"
)

// The console's charts draw the bridge's own recent history, kept here in
// memory (GET /v1/history): one sample per build that changed what is
// served, and one every historyInterval of what the xDS server counts. Both
// rings are bounded, so the history costs the same after a year as after a
// minute; a restart starts it afresh (Prometheus keeps the long view).
const historySize = 300

// historyInterval is how often the periodic sample is taken.
var historyInterval = 2 * time.Second

// BuildSample is one build that changed what proxies are served.
type BuildSample struct {
	At time.Time `json:"at"`
	// ChangeToPushMs is from the Consul change (or reload) the build
	// served to its snapshot being set, debounce included; absent when
	// the build had no timed change.
	ChangeToPushMs *float64 `json:"change_to_push_ms,omitempty"`
	BuildMs        float64  `json:"build_ms"`
	UpdateMs       float64  `json:"update_ms"`
	Types          []string `json:"types"`
}

// TickSample is the xDS server's state every historyInterval; the counts
// are since the previous sample.
type TickSample struct {
	At         time.Time `json:"at"`
	Proxies    int       `json:"proxies"`
	NACKs      float64   `json:"nacks"`
	NACKsTotal float64   `json:"nacks_total"`
	Pushes     float64   `json:"pushes"`
	Fanouts    float64   `json:"fanouts"`
	// FanoutMs is the mean fan-out time of the fan-outs that ended in
	// the interval (consul_xds_bridge_push_fanout_seconds); absent when
	// none did.
	FanoutMs *float64 `json:"fanout_ms,omitempty"`
}

// History is what GET /v1/history answers, oldest sample first.
type History struct {
	IntervalSeconds float64       `json:"interval_seconds"`
	Size            int           `json:"size"`
	Builds          []BuildSample `json:"builds"`
	Samples         []TickSample  `json:"samples"`
}

// ring is a fixed-size buffer that overwrites its oldest entry.
type ring[T any] struct {
	buf  []T
	next int
	full bool
}

func (r *ring[T]) add(v T) {
	if r.buf == nil {
		r.buf = make([]T, historySize)
	}
	r.buf[r.next] = v
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// items copies the entries out, oldest first.
func (r *ring[T]) items() []T {
	if !r.full {
		return append([]T{}, r.buf[:r.next]...)
	}
	return append(append([]T{}, r.buf[r.next:]...), r.buf[:r.next]...)
}

// history holds the rings; the loop writes builds, the sampler ticks,
// the admin API reads both, each under mu.
type history struct {
	mu      sync.Mutex
	builds  ring[BuildSample]
	samples ring[TickSample]
	// The counters at the previous tick, for the per-interval counts.
	prev    counters
	hasPrev bool
}

type counters struct{ nacks, pushes, fanouts, fanoutSum float64 }

func (h *history) addBuild(s BuildSample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.builds.add(s)
}

func (h *history) tick(at time.Time, proxies int, c counters) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := TickSample{At: at, Proxies: proxies, NACKsTotal: c.nacks}
	if h.hasPrev {
		// max(0, ...): a counter never goes back, but a registry shared
		// by two daemons (tests) could make it look so.
		s.NACKs = max(0, c.nacks-h.prev.nacks)
		s.Pushes = max(0, c.pushes-h.prev.pushes)
		s.Fanouts = max(0, c.fanouts-h.prev.fanouts)
		if s.Fanouts > 0 {
			mean := max(0, c.fanoutSum-h.prev.fanoutSum) / s.Fanouts * 1000
			s.FanoutMs = &mean
		}
	}
	h.prev, h.hasPrev = c, true
	h.samples.add(s)
}

func (h *history) snapshot() History {
	h.mu.Lock()
	defer h.mu.Unlock()
	return History{IntervalSeconds: historyInterval.Seconds(), Size: historySize, Builds: h.builds.items(), Samples: h.samples.items()}
}

// sampleHistory takes a periodic sample until ctx ends.
func (d *Daemon) sampleHistory(ctx context.Context) {
	t := d.clock.NewTicker(historyInterval)
	defer t.Stop()
	for {
		d.history.tick(d.clock.Now(), d.xds.ProxyCount(), d.xdsCounters())
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
	}
}

// xdsCounters reads the xDS server's NACK, push and fan-out counters.
func (d *Daemon) xdsCounters() counters {
	t := d.xds.Totals()
	return counters{nacks: t.NACKs, pushes: t.Pushes, fanouts: t.Fanouts, fanoutSum: t.FanoutSeconds}
}

// ConsulStatus is whether the local Consul answers, for the console's
// banner (GET /v1/consul).
type ConsulStatus struct {
	Address string `json:"address"`
	// Reachable is false once Consul has given no answer for
	// consul.reconnect_hold_after (as the consul_up gauge).
	Reachable        bool       `json:"reachable"`
	UnreachableSince *time.Time `json:"unreachable_since,omitempty"`
	LastSuccess      *time.Time `json:"last_success,omitempty"`
	LastError        string     `json:"last_error,omitempty"`
	// Stale is /readyz's reason once the outage outlasts
	// consul.stale_after, else "".
	Stale string `json:"stale,omitempty"`
}

func (d *Daemon) consulStatus() ConsulStatus {
	now := d.clock.Now()
	st := ConsulStatus{Address: d.consulAddress(), Reachable: d.outages.up("", now), Stale: d.consulStale()}
	if since := d.outages.unanswered(""); !since.IsZero() && !st.Reachable {
		st.UnreachableSince = &since
	}
	if _, last := d.outages.failing(""); !last.IsZero() {
		st.LastSuccess = &last
	}
	if err := d.outages.lastError(""); err != nil && !st.Reachable {
		st.LastError = err.Error()
	}
	return st
}
