package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
)

// TestEndpointChurnLogsASummaryAtInfo: at info level, the first snapshot
// (clusters, listeners: a real change) is logged as it happens; endpoint
// changes after it are not, one by one, but a summary line counts them
// once a minute has passed.
func TestEndpointChurnLogsASummaryAtInfo(t *testing.T) {
	logs := &syncbuffer.Buffer{}
	h := startLoopWith(t, func(c *Config, _ *loop) {
		c.Logger = zerolog.New(logs).Level(zerolog.InfoLevel)
		c.Settings.XDS.DebounceAdaptive = false // changes within a hold-off wait for it
	})
	holdOff := h.d.cfg.Settings.XDS.DebounceHoldOff
	build := func(port int, wantBuilds float64, debounced bool) {
		t.Helper()
		h.send(port)
		if debounced { // within the window of the build before: it waits
			armed, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := h.clock.BlockUntilContext(armed, 1); err != nil {
				t.Fatalf("no build timer armed: %v", err)
			}
			h.clock.Advance(holdOff)
		}
		h.eventually("the build", func() bool { return h.builds() == wantBuilds })
	}
	build(8001, 1, false)
	build(8002, 2, true)
	build(8003, 3, true)
	if evs := logEvents(logs, "snapshot updated"); len(evs) != 1 {
		t.Errorf("%d \"snapshot updated\" lines at info, want 1 (the first snapshot; endpoint changes are debug):\n%s", len(evs), logs.String())
	}
	if evs := logEvents(logs, "snapshots updated"); len(evs) != 0 {
		t.Fatalf("a summary within the first minute:\n%s", logs.String())
	}
	h.clock.Advance(changeSummaryEvery)
	build(8004, 4, false) // quiet for a minute: built at once
	evs := logEvents(logs, "snapshots updated")
	if len(evs) != 1 {
		t.Fatalf("no summary after a minute:\n%s", logs.String())
	}
	if evs[0]["snapshots"] != 4.0 || evs[0]["types"] == nil {
		t.Errorf("summary %v, want 4 snapshots and their types", evs[0])
	}
}
