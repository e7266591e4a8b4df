package consul

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// TestWatcherFollowedServicesKeepSlotsAgainstConsul: 24 views on 5 slots
// (and the two hint views') take turns; the two services SetFollowed names
// keep a slot each and block for the whole wait time, while the others'
// turns stay shortened; a flip of a followed service is published by its
// own query, without a hurried read; and once nothing is followed, all
// take turns again.
func TestWatcherFollowedServicesKeepSlotsAgainstConsul(t *testing.T) {
	t.Parallel()
	// 7 slots: two for the hint views, two for the followed ones, and
	// three for the others' turns (one of them kept for hurried reads).
	const services, slots = 24, 7
	o := startOversubscribed(t, services, slots, QueryOptions{WaitTime: 10 * time.Second})
	waitFor(t, o.w, 30*time.Second, "every service read", allPassing(services))
	o.w.SetFollowed([]ServiceKey{{Name: "svc05"}, {Name: "svc06"}})

	waits := func(path string) []string {
		o.transport.mu.Lock()
		defer o.transport.mu.Unlock()
		return slices.Clone(o.transport.waits[path])
	}
	// Each followed view gets its slot once the turn it was in ends (a
	// shortened wait at most): then it blocks for the whole 10 s.
	deadline := time.Now().Add(15 * time.Second)
	for _, path := range []string{"/v1/health/service/svc05", "/v1/health/service/svc06"} {
		for {
			if w := waits(path); len(w) > 0 && w[len(w)-1] == "10000ms" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never blocked for the whole wait time: waits %v", path, waits(path))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The others' turns: 22 views on what is left (3 slots, one kept for
	// hurried reads), 10 s × 2 / 22, raised to the 2 s floor.
	turnsFrom := map[string]int{}
	o.transport.mu.Lock()
	for path, w := range o.transport.waits {
		turnsFrom[path] = len(w)
	}
	o.transport.mu.Unlock()
	time.Sleep(3 * time.Second)
	turns := 0
	o.transport.mu.Lock()
	for path, w := range o.transport.waits {
		if path == "/v1/health/service/svc05" || path == "/v1/health/service/svc06" || !strings.HasPrefix(path, "/v1/health/service/") {
			continue
		}
		for _, wait := range w[turnsFrom[path]:] {
			turns++
			if wait != "2000ms" {
				t.Errorf("%s, nobody follows it, blocked %s; want turns of 2000ms", path, wait)
			}
		}
	}
	o.transport.mu.Unlock()
	if turns == 0 {
		t.Error("no service nobody follows had a turn in 3s")
	}

	// A flip of a followed service: its own blocking query returns it.
	before := o.transport.requests("/v1/health/service/svc05")
	took := o.setHealth(t, "svc05", api.HealthCritical, StatusCritical)
	t.Logf("svc05 critical in the published catalog %v after the check changed", took.Round(time.Millisecond))
	// Its blocking query answered, and the next one started: two at most.
	if n := o.transport.requests("/v1/health/service/svc05") - before; n > 2 {
		t.Errorf("%d requests for svc05 to see one flip, want its own query's answer and the next", n)
	}

	// Nothing followed: the two views take turns again (their next
	// query waits for its turn, behind the others).
	o.w.SetFollowed(nil)
	deadline = time.Now().Add(5 * time.Second)
	for {
		o.w.slots.mu.Lock()
		n, pri := o.w.slots.followedViews, o.w.slots.prioritised()
		o.w.slots.mu.Unlock()
		if n == 0 && !pri {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d views still followed once nobody follows them", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	o.check(t, slots)
}
