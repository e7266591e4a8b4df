package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/policytest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// loopHarness runs the daemon loop without Consul: catalog updates come
// from a channel, time from a fake clock, and a build can be made to fail.
type loopHarness struct {
	t        *testing.T
	clock    *clockwork.FakeClock
	d        *Daemon
	updates  chan consul.Update
	kv       chan consul.KVUpdate // KV policy documents, as the watcher sends them
	attempts atomic.Int32         // translations tried
	fail     atomic.Bool          // the next translations fail
	// failGroup, if set, makes the next translations report that group
	// failed (as odd Consul data would).
	failGroup atomic.Pointer[string]
	// translateCost, if set, is how far a translation moves the fake
	// clock (nanoseconds): what a build takes.
	translateCost atomic.Int64
	// world is the last world the loop computed.
	world atomic.Pointer[pipeline.World]
}

func startLoop(t *testing.T) *loopHarness { return startLoopWith(t, nil) }

// startLoopWith is startLoop with the daemon's Config and the loop
// adjusted by configure before the loop starts.
func startLoopWith(t *testing.T, configure func(*Config, *loop)) *loopHarness {
	t.Helper()
	cfg := mergedPolicy(t, "export_all_services = true\n")
	h := &loopHarness{t: t, clock: clockwork.NewFakeClockAt(time.Unix(1_000_000, 0)), updates: make(chan consul.Update), kv: make(chan consul.KVUpdate)}
	dcfg := Config{Settings: cfg.Settings, Policy: cfg.Policy, Logger: zerolog.New(zerolog.NewTestWriter(t)), Clock: h.clock,
		CPUTime: func() time.Duration { return 0 }} // the idle collector sees an idle process
	// An unstarted watcher: accepted policies retarget it; the catalog
	// comes from h.updates.
	l := &loop{policy: cfg.Policy, memo: pipeline.NewMemo(), watcher: consul.NewWatcher(consul.Config{})}
	if configure != nil {
		configure(&dcfg, l)
	}
	h.d = New(dcfg)
	l.d = h.d
	l.compute = func(in pipeline.Input, memo *pipeline.Memo) (*pipeline.World, error) {
		h.attempts.Add(1)
		if d := h.translateCost.Load(); d > 0 {
			h.clock.Advance(time.Duration(d))
		}
		if h.fail.Load() {
			return nil, errors.New("injected translation failure")
		}
		w, err := pipeline.Compute(in, memo)
		if g := h.failGroup.Load(); g != nil && err == nil {
			w.Output.Failed[*g] = errors.New("proxy group " + *g + ": injected failure")
		}
		if err == nil {
			h.world.Store(w)
		}
		return w, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.run(ctx, h.updates, h.kv); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// mergedPolicy is the configuration one policy file src makes.
func mergedPolicy(t *testing.T, src string) *policy.Config {
	t.Helper()
	return policytest.Config(t, "policy.hcl", []byte(src))
}

// send hands the loop a complete catalog in which service web has one
// instance on port.
func (h *loopHarness) send(port int) {
	h.t.Helper()
	h.sendStatus(port, consul.StatusPassing, uint64(port))
}

// sendStatus is send with the instance's health and the service's index.
func (h *loopHarness) sendStatus(port int, status consul.Status, index uint64) {
	h.t.Helper()
	h.sendFull(port, status, index, consul.Change{})
}

// sendChange is send saying what the watcher says changed.
func (h *loopHarness) sendChange(port int, ch consul.Change) {
	h.t.Helper()
	h.sendFull(port, consul.StatusPassing, uint64(port), ch)
}

func (h *loopHarness) sendFull(port int, status consul.Status, index uint64, ch consul.Change) {
	h.t.Helper()
	cat := consul.NewCatalog([]*consul.Service{{Name: "web", Index: index, Instances: []consul.Instance{
		{ID: "web-1", Node: "n1", Address: "10.0.0.1", Port: port, Status: status},
	}}})
	select {
	case h.updates <- consul.Update{Catalog: cat, Complete: true, ChangedAt: h.clock.Now(), Changed: ch}:
	case <-time.After(10 * time.Second):
		h.t.Fatal("the loop did not take the update")
	}
}

// eventually waits (a generous bound against hangs, in real time) for
// cond; the loop runs on its own goroutine.
func (h *loopHarness) eventually(what string, cond func() bool) {
	h.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (h *loopHarness) builds() float64 { return testutil.ToFloat64(h.d.metrics.builds) }

// served is the web endpoint the shared key is served, "" before any.
func (h *loopHarness) served() string {
	dump, err := h.d.xds.ConfigDump("", "")
	if err != nil || len(dump.Endpoints) == 0 {
		return ""
	}
	return string(dump.Endpoints[0])
}

// TestLoopDebounceAndLastGood drives the daemon loop with a fake clock:
// a lone change builds at once, changes within a hold-off coalesce into
// one build when the hold-off ends, a failed build keeps the last good
// state, and the next change builds again.
func TestLoopDebounceAndLastGood(t *testing.T) {
	// A fixed hold-off (debounce_adaptive = false): the adaptive window
	// is zero for so few changes (loop_debounce_test.go).
	h := startLoopWith(t, func(c *Config, _ *loop) { c.Settings.XDS.DebounceAdaptive = false })
	holdOff := h.d.cfg.Settings.XDS.DebounceHoldOff

	// A lone change: built without the clock moving.
	h.send(8001)
	h.eventually("the first build", func() bool { return h.builds() == 1 })
	if !strings.Contains(h.served(), `"port_value":8001`) {
		t.Fatalf("served %s, want port 8001", h.served())
	}

	// A burst within the hold-off: nothing is built until it ends, then
	// once, with the newest catalog.
	h.send(8002)
	h.send(8003)
	h.send(8004)
	armed, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.clock.BlockUntilContext(armed, 1); err != nil {
		t.Fatalf("no build timer armed for the burst: %v", err)
	}
	// The loop has taken the last change (its catalog view shows it)
	// before the clock moves.
	h.eventually("the loop to take the burst", func() bool {
		cv := h.d.catalog.Load()
		return cv != nil && len(cv.Services) == 1 && cv.Services[0].Instances[0].Port == 8004
	})
	if got := h.attempts.Load(); got != 1 {
		t.Fatalf("%d translations during the hold-off, want still 1", got)
	}
	if !h.d.buildPending.Load() {
		t.Error("no build pending during the hold-off (the idle collector would collect)")
	}
	h.clock.Advance(holdOff)
	h.eventually("the burst's build", func() bool { return h.builds() == 2 })
	// buildsDone counts a build once it has set the flag for what follows
	// (builds counts it before: CI once read the flag in between).
	h.eventually("the burst's build's end", func() bool { return h.d.buildsDone.Load() == 2 })
	if h.d.buildPending.Load() {
		t.Error("a build still pending after the burst was built")
	}
	if got := h.attempts.Load(); got != 2 {
		t.Errorf("%d translations for a burst of 3 changes, want 1 more (2 in all)", got)
	}
	if !strings.Contains(h.served(), `"port_value":8004`) {
		t.Fatalf("served %s after the burst, want its newest catalog (port 8004)", h.served())
	}

	// A failed build keeps the last good state...
	h.fail.Store(true)
	h.clock.Advance(holdOff) // quiet: the next change builds at once
	h.send(8005)
	h.eventually("the failing build", func() bool { return h.attempts.Load() == 3 })
	if got := h.builds(); got != 2 {
		t.Errorf("builds = %v after a failed one, want 2", got)
	}
	if !strings.Contains(h.served(), `"port_value":8004`) {
		t.Fatalf("served %s after a failed build, want the last good (port 8004)", h.served())
	}
	// A failed build leaves nothing pending (the idle collector would
	// otherwise never collect again).
	h.eventually("no build pending after the failed one", func() bool { return !h.d.buildPending.Load() })
	// ...and the next change builds again.
	h.fail.Store(false)
	h.clock.Advance(holdOff)
	h.send(8006)
	h.eventually("the build after the failure", func() bool { return h.builds() == 3 })
	if !strings.Contains(h.served(), `"port_value":8006`) {
		t.Fatalf("served %s, want port 8006", h.served())
	}
}

// TestLoopShowsFailedGroups: a group the build could not translate is on
// /v1/policy and in the failing-groups gauge until it translates again.
func TestLoopShowsFailedGroups(t *testing.T) {
	h := startLoop(t)
	h.send(8001)
	h.eventually("the first build", func() bool { return h.builds() == 1 })
	g := "edge"
	h.failGroup.Store(&g)
	h.clock.Advance(time.Hour)
	h.send(8002)
	h.eventually("the failed group on /v1/policy", func() bool { return len(h.d.Policy().FailedGroups) == 1 })
	if f := h.d.Policy().FailedGroups[0]; f.Group != "edge" || !strings.Contains(f.Error, "injected failure") {
		t.Errorf("failed group = %+v", f)
	}
	if got := testutil.ToFloat64(h.d.metrics.failingGroups); got != 1 {
		t.Errorf("failing groups gauge = %v, want 1", got)
	}
	h.failGroup.Store(nil)
	h.clock.Advance(time.Hour)
	h.send(8003)
	h.eventually("the failure cleared", func() bool { return len(h.d.Policy().FailedGroups) == 0 && h.builds() == 3 })
	if got := testutil.ToFloat64(h.d.metrics.failingGroups); got != 0 {
		t.Errorf("failing groups gauge = %v after recovery, want 0", got)
	}
}

// TestLoopFirstBuildNeedsEveryGroup: a group that fails in the bridge's
// first build has no last good state, and the bridge stays not ready and
// serves nothing (docs/operations/failure-behaviour.md says so); the first
// build that translates every group serves and makes it ready.
func TestLoopFirstBuildNeedsEveryGroup(t *testing.T) {
	h := startLoop(t)
	g := "edge"
	h.failGroup.Store(&g)
	h.send(8001)
	h.eventually("the first build's attempt", func() bool { return h.d.buildsDone.Load() == 1 })
	if h.d.ready.Load() || h.served() != "" {
		t.Fatalf("ready %v, served %q after a first build with a failed group; want not ready, nothing served", h.d.ready.Load(), h.served())
	}
	// Every signal names the group, not Consul's first sync.
	if r := h.d.notReadyReason(); !strings.Contains(r, `the first build failed for proxy group "edge"`) {
		t.Errorf("/readyz says %q, want the failed group", r)
	}
	if fg := h.d.Policy().FailedGroups; len(fg) != 1 || fg[0].Group != "edge" {
		t.Errorf("failed_groups %+v, want edge", fg)
	}
	if v := testutil.ToFloat64(h.d.metrics.failingGroups); v != 1 {
		t.Errorf("proxy_groups_failing %v, want 1", v)
	}
	h.failGroup.Store(nil)
	h.clock.Advance(time.Hour)
	h.send(8002)
	h.eventually("the first whole build", func() bool { return h.d.ready.Load() })
	if !strings.Contains(h.served(), `"port_value":8002`) {
		t.Fatalf("served %s, want port 8002", h.served())
	}
	if fg := h.d.Policy().FailedGroups; len(fg) != 0 || h.d.notReadyReason() != "" {
		t.Errorf("after the whole build: failed_groups %+v, reason %q", fg, h.d.notReadyReason())
	}
}

// startEntriesLoop starts the loop with config entries in its policy and
// the policy file src, sends the first (empty) read of the entries, and
// returns once that read's parse has started and stalls (src holds
// "slow"); release lets it finish (also at the test's end).
func startEntriesLoop(t *testing.T, src string) (*loopHarness, func()) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var parses *atomic.Int32
	var stalled chan struct{}
	entries := make(chan consul.ConfigEntriesUpdate)
	h := startLoopWith(t, func(c *Config, l *loop) {
		c.ConfigFiles = []string{file}
		l.parser, parses, stalled = stallingParser(c.Clock)
		l.ce = configEntries{needed: true, updates: entries}
		l.policyEntries = true
	})
	var once sync.Once
	release := func() { once.Do(func() { close(stalled) }) }
	t.Cleanup(release)
	entries <- consul.ConfigEntriesUpdate{}
	h.eventually("the first policy read to start", func() bool { return parses.Load() >= 1 })
	return h, release
}

// TestLoopFirstBuildWaitsForConfigEntriesPolicy: with config entries in
// the policy, the first read of them runs off the loop; a catalog that
// arrives meanwhile is not built with the files' policy alone (CI once
// served a first world without a service-resolver redirect, then the
// redirect in make-before-break steps). The first build comes once the
// read is applied.
func TestLoopFirstBuildWaitsForConfigEntriesPolicy(t *testing.T) {
	h, release := startEntriesLoop(t, "# slow\nexport_all_services = true\n")
	h.send(8001)
	time.Sleep(100 * time.Millisecond) // a build would start at once: a lone change
	if n := h.builds(); n != 0 || h.d.ready.Load() || h.served() != "" {
		t.Fatalf("%v builds (ready %v, served %q) while the first policy read with the config entries ran; want none", n, h.d.ready.Load(), h.served())
	}
	release()
	h.eventually("the first build after the read", func() bool { return h.d.ready.Load() })
	if !strings.Contains(h.served(), `"port_value":8001`) {
		t.Fatalf("served %s, want port 8001", h.served())
	}
}

// TestLoopFirstBuildAfterARejectedRead: a first policy read that is
// rejected (here the file broke before it) does not leave the build it
// held waiting for another change: it runs with the policy the bridge
// started with, as before.
func TestLoopFirstBuildAfterARejectedRead(t *testing.T) {
	h, release := startEntriesLoop(t, "# slow\nexport_all_services = \n")
	h.send(8001)
	release()
	h.eventually("the rejection", func() bool { return h.d.Policy().LastError != nil })
	h.eventually("the first build after the rejected read", func() bool { return h.d.ready.Load() })
}

// TestLoopReportsSkippedServices: catalog services the watcher skipped
// for their names are warnings on /v1/policy and in a gauge; the build
// goes on without them.
func TestLoopReportsSkippedServices(t *testing.T) {
	h := startLoop(t)
	cat := consul.NewCatalog([]*consul.Service{{Name: "web", Instances: []consul.Instance{
		{ID: "web-1", Node: "n1", Address: "10.0.0.1", Port: 8001, Status: consul.StatusPassing},
	}}})
	h.updates <- consul.Update{Catalog: cat, Complete: true, Skipped: []string{"bad\tname"}, ChangedAt: h.clock.Now()}
	h.eventually("the build", func() bool { return h.builds() == 1 })
	h.eventually("the warning", func() bool {
		return strings.Contains(strings.Join(h.d.Policy().Warnings, "\n"), `Consul service "bad\tname" is skipped`)
	})
	if got := testutil.ToFloat64(h.d.metrics.skippedServices); got != 1 {
		t.Errorf("skipped services gauge = %v, want 1", got)
	}
}

// TestLoopSlowPolicyDoesNotHoldUpdates: a policy document that takes long
// to parse is parsed off the loop, so catalog changes keep being built
// and served meanwhile; over the budget it is rejected with a diagnostic
// (the last good policy stays), and it is not parsed again while unchanged.
func TestLoopSlowPolicyDoesNotHoldUpdates(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte("export_all_services = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var parses *atomic.Int32
	var release chan struct{}
	h := startLoopWith(t, func(c *Config, l *loop) {
		c.ConfigFiles = []string{file}
		l.parser, parses, release = stallingParser(c.Clock)
	})
	defer close(release)
	h.send(8001)
	h.eventually("the first build", func() bool { return h.builds() == 1 })

	if err := os.WriteFile(file, []byte("# slow\nexport_all_services = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.d.Reload()
	h.eventually("the slow parse to start", func() bool { return parses.Load() == 2 })
	// The loop is not waiting for the parse: a catalog change is built
	// and served while it runs.
	h.clock.Advance(h.d.cfg.Settings.XDS.DebounceHoldOff)
	h.send(8002)
	h.eventually("a build during the slow parse", func() bool { return h.builds() == 2 })
	if !strings.Contains(h.served(), `"port_value":8002`) {
		t.Fatalf("served %s during a slow policy parse, want the new catalog (port 8002)", h.served())
	}
	if h.d.Policy().LastError != nil {
		t.Fatal("the reload was decided before its parse ended or the budget ran out")
	}
	h.clock.Advance(ParseBudget)
	h.eventually("the over-budget reload to be rejected", func() bool { return h.d.Policy().LastError != nil })
	if got := strings.Join(h.d.Policy().LastError.Diagnostics, "; "); !strings.Contains(got, file) || !strings.Contains(got, "too long to parse") {
		t.Fatalf("rejection = %q, want a too-long-to-parse diagnostic naming %s", got, file)
	}
	// Unchanged, it is rejected again at once, without another parse.
	h.d.Reload()
	h.eventually("the second rejection", func() bool { return h.d.Policy().FailedReloads == 2 })
	if n := parses.Load(); n != 2 {
		t.Fatalf("the unchanged slow document was parsed %d more times, want once", n-1)
	}
}

// TestLoopHoldsDowngradesAfterReconnect: after Consul's agent was down, a
// health downgrade is held until the hold window ends, a build stays
// pending meanwhile (the idle collector must not take the rebuild's
// moment for idle), and the rebuild at the window's end serves it.
func TestLoopHoldsDowngradesAfterReconnect(t *testing.T) {
	h := startLoop(t)
	holdOff := h.d.cfg.Settings.XDS.DebounceHoldOff
	h.send(8001)
	h.eventually("the first build", func() bool { return h.builds() == 1 })
	if !strings.Contains(h.served(), `"HEALTHY"`) {
		t.Fatalf("served %s, want the instance healthy", h.served())
	}
	// The agent refused connections, then answered: the hold arms.
	now := h.clock.Now()
	refused := &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	h.d.outages.record("", refused, now, true)
	if down := h.d.outages.record("", nil, now.Add(time.Millisecond), true); down == 0 {
		t.Fatal("a refused connection armed no hold")
	}
	h.clock.Advance(holdOff) // quiet: the downgrade builds at once
	h.sendStatus(8001, consul.StatusCritical, 2)
	h.eventually("the held build", func() bool { return h.builds() == 2 })
	if !strings.Contains(h.served(), `"HEALTHY"`) {
		t.Fatalf("served %s during the hold, want the instance still healthy", h.served())
	}
	// buildsDone counts a build once it has set the flag for what follows.
	h.eventually("the held build's end", func() bool { return h.d.buildsDone.Load() == 2 })
	if !h.d.buildPending.Load() {
		t.Error("no build pending while the hold waits for its rebuild")
	}
	h.clock.Advance(h.d.cfg.Settings.Consul.ReconnectHold)
	h.eventually("the rebuild at the hold's end", func() bool { return h.builds() == 3 })
	if strings.Contains(h.served(), `"HEALTHY"`) {
		t.Fatalf("served %s after the hold, want the downgrade", h.served())
	}
	h.eventually("nothing pending after the rebuild", func() bool { return !h.d.buildPending.Load() })
}

// TestLoopHoldsRemovalsAfterReconnect: a Consul that comes back without
// its state answers with a service's instances gone (its index back at
// 1) until its agents register them again; within the hold window the
// proxies keep the instance, and the rebuild at the window's end serves
// what Consul says then.
func TestLoopHoldsRemovalsAfterReconnect(t *testing.T) {
	h := startLoop(t)
	h.send(8001)
	h.eventually("the first build", func() bool { return h.builds() == 1 })
	now := h.clock.Now()
	refused := &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	h.d.outages.record("", refused, now, true)
	if down := h.d.outages.record("", nil, now.Add(time.Millisecond), true); down == 0 {
		t.Fatal("a refused connection armed no hold")
	}
	h.clock.Advance(h.d.cfg.Settings.XDS.DebounceHoldOff)
	empty := consul.NewCatalog([]*consul.Service{{Name: "web", Index: 1}})
	select {
	case h.updates <- consul.Update{Catalog: empty, Complete: true, ChangedAt: h.clock.Now()}:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not take the update")
	}
	h.eventually("the held build", func() bool { return h.builds() == 2 })
	if !strings.Contains(h.served(), `"port_value":8001`) {
		t.Fatalf("served %s during the hold, want the instance Consul lost kept", h.served())
	}
	h.eventually("the held build's end", func() bool { return h.d.buildsDone.Load() == 2 })
	h.clock.Advance(h.d.cfg.Settings.Consul.ReconnectHold)
	h.eventually("the rebuild at the hold's end", func() bool { return h.builds() == 3 })
	if strings.Contains(h.served(), `"port_value":8001`) {
		t.Fatalf("served %s after the hold, want the removal", h.served())
	}
}

// logEvents are the JSON log events in logs with message msg.
func logEvents(logs *syncbuffer.Buffer, msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(logs.String(), "\n") {
		var ev map[string]any
		if json.Unmarshal([]byte(line), &ev) == nil && ev["message"] == msg {
			out = append(out, ev)
		}
	}
	return out
}

// TestLoopLogsWhereAChangesTimeWent: "snapshot updated" says how long the
// change waited for its build (the debounce window here), how long
// building took (a translation made to take 3 ms) and serving (no time on
// the fake clock), within the time since Consul's change.
func TestLoopLogsWhereAChangesTimeWent(t *testing.T) {
	logs := &syncbuffer.Buffer{}
	h := startLoopWith(t, func(c *Config, _ *loop) {
		c.Logger = zerolog.New(logs)
		c.Settings.XDS.DebounceAdaptive = false // a window to wait out
	})
	holdOff := h.d.cfg.Settings.XDS.DebounceHoldOff
	h.send(8001)
	h.eventually("the first build", func() bool { return h.builds() == 1 })
	h.translateCost.Store(int64(3 * time.Millisecond))
	h.send(8002) // within the window of the first build: it waits
	armed, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.clock.BlockUntilContext(armed, 1); err != nil {
		t.Fatalf("no build timer armed: %v", err)
	}
	h.clock.Advance(holdOff)
	h.eventually("the second build's log", func() bool { return len(logEvents(logs, "snapshot updated")) == 2 })
	evs := logEvents(logs, "snapshot updated")
	ms := float64(holdOff) / float64(time.Millisecond)
	if w := evs[0]["waited"]; w != 0.0 {
		t.Errorf("the first change waited %v ms, want 0 (built at once)", w)
	}
	ev := evs[1]
	want := map[string]any{"waited": ms, "build": 3.0, "update": 0.0, "since_consul_change": ms + 3}
	for f, v := range want {
		if ev[f] != v {
			t.Errorf("snapshot updated: %s = %v ms, want %v (%v)", f, ev[f], v, ev)
		}
	}
}

// TestLoopSlowFilesDoNotHoldUpdates: the files a policy names are read off
// the loop, with its documents: while they take long (a hung network file
// system), a catalog change is still built and served, and the reload is
// decided (here: rejected) when the read ends.
func TestLoopSlowFilesDoNotHoldUpdates(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte("export_all_services = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	h := startLoopWith(t, func(c *Config, l *loop) {
		c.ConfigFiles = []string{file}
		l.readFiles = func(p *policy.Policy, now time.Time) hcl.Diagnostics {
			reads.Add(1)
			<-release
			return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Cannot read JWKS file", Detail: "read timed out", Subject: &hcl.Range{Filename: file}}}
		}
	})
	t.Cleanup(unblock) // registered after the loop's: runs before it stops
	h.send(8001)
	h.eventually("the first build", func() bool { return h.builds() == 1 })
	h.d.Reload()
	h.eventually("the slow file read to start", func() bool { return reads.Load() == 1 })
	h.clock.Advance(h.d.cfg.Settings.XDS.DebounceHoldOff)
	h.send(8002)
	h.eventually("a build during the slow file read", func() bool { return h.builds() == 2 })
	if !strings.Contains(h.served(), `"port_value":8002`) {
		t.Fatalf("served %s during a slow file read, want the new catalog (port 8002)", h.served())
	}
	if h.d.Policy().LastError != nil {
		t.Fatal("the reload was decided before its files were read")
	}
	unblock()
	h.eventually("the reload to be rejected after the read", func() bool { return h.d.Policy().LastError != nil })
	if got := strings.Join(h.d.Policy().LastError.Diagnostics, "; "); !strings.Contains(got, "Cannot read JWKS file") {
		t.Fatalf("rejection = %q, want the file read's diagnostic", got)
	}
}

// TestLoopFirstBuildWaitsForFollowedServices: before the first build is
// served, a catalog that lacks a service the watcher now follows (the
// mesh or the config entries added it after the catalog's last complete
// read) is not served: the bridge would call itself ready with that
// service's endpoints missing (its sidecars unhealthy). The catalog that
// has it is.
func TestLoopFirstBuildWaitsForFollowedServices(t *testing.T) {
	cfg := mergedPolicy(t, "export_all_services = true\nservice \"api\" {\n  connect_timeout = \"2s\"\n}\n")
	h := startLoopWith(t, func(c *Config, l *loop) { c.Policy, l.policy = cfg.Policy, cfg.Policy })
	h.send(8080) // web only: api, which the policy follows, is not in it
	time.Sleep(100 * time.Millisecond)
	h.clock.Advance(time.Second)
	time.Sleep(100 * time.Millisecond)
	if h.d.ready.Load() || h.builds() != 0 {
		t.Fatalf("ready %v after %v builds of a catalog without api", h.d.ready.Load(), h.builds())
	}
	cat := consul.NewCatalog([]*consul.Service{
		{Name: "api", Index: 2, Instances: []consul.Instance{{ID: "api-1", Node: "n1", Address: "10.0.0.2", Port: 9090, Status: consul.StatusPassing}}},
		{Name: "web", Index: 1, Instances: []consul.Instance{{ID: "web-1", Node: "n1", Address: "10.0.0.1", Port: 8080, Status: consul.StatusPassing}}},
	})
	h.updates <- consul.Update{Catalog: cat, Complete: true, ChangedAt: h.clock.Now()}
	h.eventually("the first build, with api", func() bool { return h.d.ready.Load() })
	if w := h.world.Load(); w == nil || w.Model.Cluster("api") == nil || len(w.Model.Cluster("api").Endpoints) != 1 {
		t.Fatalf("first world's api cluster: %+v", w)
	}
}
