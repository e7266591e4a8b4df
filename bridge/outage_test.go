package bridge

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// TestOutages: the reconnect hold arms only after a datacenter gave no
// answer for `after`, and holds only that datacenter; a lone failed
// request, an HTTP error answer (403) or a remote datacenter's outage
// leaves the local one alone, and consul_up follows the local one.
func TestOutages(t *testing.T) {
	const after, hold = 2 * time.Second, 15 * time.Second
	t0 := time.Unix(1_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	refused := fmt.Errorf("Get http://127.0.0.1:8500/v1/health/service/web: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	timeout := errors.New("Get http://127.0.0.1:8500/v1/health/service/web: context deadline exceeded")
	status500 := api.StatusError{Code: 500, Body: "No cluster leader"}
	forbidden := api.StatusError{Code: 403, Body: "Permission denied"}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }

	t.Run("one failed request retried at once", func(t *testing.T) {
		o := newOutages(after, hold)
		o.record("", nil, at(0), true)
		o.record("", status500, at(ms(1000)), true)
		if !o.up("", at(ms(1100))) {
			t.Error("consul_up down 100ms after one failed request")
		}
		if down := o.record("", nil, at(ms(1300)), true); down != 0 {
			t.Errorf("a 300ms blip armed the hold (down %v)", down)
		}
		if held, _ := o.holding(at(ms(1400))); len(held) != 0 {
			t.Errorf("holding %v after a blip", held)
		}
	})
	t.Run("an HTTP error answer is an answer", func(t *testing.T) {
		// What failure-behaviour.md names: 403, 404 and 429 mean Consul is
		// reachable; 408 (the request timed out) does not.
		for _, answer := range []api.StatusError{forbidden, {Code: 404, Body: "Not found"}, {Code: 429, Body: "Too many requests"}} {
			o := newOutages(after, hold)
			o.record("", answer, at(0), true)
			o.record("", answer, at(ms(5000)), true)
			if !o.up("", at(ms(5000))) {
				t.Errorf("consul_up down while Consul answers %d", answer.Code)
			}
			if o.record("", nil, at(ms(6000)), true) != 0 {
				t.Errorf("%d answers armed the hold", answer.Code)
			}
			if since, _ := o.failing(""); !since.IsZero() {
				t.Error("still failing after a success")
			}
		}
		o := newOutages(after, hold)
		o.record("", api.StatusError{Code: 408}, at(0), true)
		if o.up("", at(ms(5000))) {
			t.Error("consul_up still up after 5 s of 408s: a timed-out request is no answer")
		}
	})
	t.Run("a real local outage holds the local datacenter only", func(t *testing.T) {
		o := newOutages(after, hold)
		o.record("dc2", nil, at(0), true)
		for i := 0; i <= 30; i++ {
			o.record("", refused, at(ms(100*i)), true)
		}
		if o.up("", at(ms(3000))) {
			t.Error("consul_up still 1 after 3s without an answer")
		}
		if down := o.record("", nil, at(ms(3100)), true); down != ms(3100) {
			t.Errorf("outage of %v reported, want 3.1s", down)
		}
		held, until := o.holding(at(ms(4000)))
		if !maps.Equal(held, map[string]bool{"": true}) || !until.Equal(at(ms(3100)+hold)) {
			t.Errorf("holding %v until %v, want the local datacenter until 18.1s", held, until)
		}
		if held, _ := o.holding(at(ms(3100) + hold)); len(held) != 0 {
			t.Errorf("still holding %v when the window ends", held)
		}
	})
	t.Run("a remote outage holds that datacenter only", func(t *testing.T) {
		o := newOutages(after, hold)
		for i := 0; i <= 50; i++ {
			o.record("dc2", refused, at(ms(100*i)), true)
			o.record("", nil, at(ms(100*i)), true)
		}
		if !o.up("", at(ms(5000))) {
			t.Error("local consul_up down because dc2 is")
		}
		if since, _ := o.failing(""); !since.IsZero() {
			t.Error("the local datacenter counts as failing because dc2 is")
		}
		o.record("dc2", nil, at(ms(5100)), true)
		if held, _ := o.holding(at(ms(5200))); !maps.Equal(held, map[string]bool{"dc2": true}) {
			t.Errorf("holding %v, want dc2 only", held)
		}
	})
	t.Run("a quick agent restart: connections refused", func(t *testing.T) {
		o := newOutages(after, hold)
		o.record("", refused, at(0), true)
		if down := o.record("", nil, at(ms(800)), true); down == 0 {
			t.Error("an agent that refused connections for 0.8s (a restart) armed no hold")
		}
		if held, _ := o.holding(at(ms(900))); !held[""] {
			t.Errorf("holding %v after a quick restart, want the local datacenter", held)
		}
		o2 := newOutages(after, hold)
		o2.record("", timeout, at(0), true)
		if o2.record("", nil, at(ms(800)), true) != 0 {
			t.Error("one timed-out request retried at once armed the hold")
		}
	})
	t.Run("no hold before the first build is served", func(t *testing.T) {
		o := newOutages(after, hold)
		o.record("", refused, at(0), false)
		if o.record("", nil, at(ms(5000)), false) != 0 {
			t.Error("hold armed before ready")
		}
	})
}
