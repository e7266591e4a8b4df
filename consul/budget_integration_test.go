package consul

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
)

// countingTransport counts the requests in flight, from the start of the
// round trip until the body is closed, which is as long as a connection is
// busy with them.
type countingTransport struct {
	base http.RoundTripper

	mu       sync.Mutex
	inFlight int
	most     int
	byPath   map[string]int
	waits    map[string][]string // the wait parameter of blocking requests, by path
	cached   int                 // health requests that went through the agent cache
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/v1/catalog/services" {
		// The service list runs beside the budget (see Config.MaxQueries).
		c.mu.Lock()
		c.byPath[r.URL.Path]++
		c.mu.Unlock()
		return c.base.RoundTrip(r)
	}
	c.mu.Lock()
	c.inFlight++
	c.most = max(c.most, c.inFlight)
	c.byPath[r.URL.Path]++
	if q := r.URL.Query(); q.Get("index") != "" {
		c.waits[r.URL.Path] = append(c.waits[r.URL.Path], q.Get("wait"))
	}
	if _, ok := r.URL.Query()["cached"]; ok && strings.HasPrefix(r.URL.Path, "/v1/health/service/") {
		c.cached++
	}
	c.mu.Unlock()
	resp, err := c.base.RoundTrip(r)
	if err != nil {
		c.done()
		return nil, err
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, done: c.done}
	return resp, nil
}

func (c *countingTransport) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight--
}

func (c *countingTransport) requests(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byPath[path]
}

type countedBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *countedBody) Close() error {
	b.once.Do(b.done)
	return b.ReadCloser.Close()
}

// queryLog keeps what OnQuery was told.
type queryLog struct {
	mu     sync.Mutex
	count  map[string]int
	errors []string
}

func (l *queryLog) record(endpoint, _ string, err error, _ time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count[endpoint]++
	if err != nil && !errors.Is(err, context.Canceled) {
		l.errors = append(l.errors, endpoint+": "+err.Error())
	}
}

func (l *queryLog) snapshot() (map[string]int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for k, v := range l.count {
		out[k] = v
	}
	return out, slices.Clone(l.errors)
}

type oversubscribed struct {
	agent     *consultest.Agent
	w         *Watcher
	transport *countingTransport
	queries   *queryLog
	logs      *syncbuffer.Buffer
	stop      func() // stops the watcher and waits for it
	// statsErr is set if a QueryStats sample broke the budget.
	statsMu  sync.Mutex
	statsErr string
	samples  int
}

// startOversubscribed registers n services with one TTL instance each
// (svcNN, instance svcNN-1, check service:svcNN-1) and watches them with
// maxQueries slots, sampling QueryStats all the while.
func startOversubscribed(t *testing.T, n, maxQueries int, q QueryOptions) *oversubscribed {
	t.Helper()
	o := &oversubscribed{
		agent:     consultest.Start(t),
		transport: &countingTransport{base: http.DefaultTransport.(*http.Transport).Clone(), byPath: map[string]int{}, waits: map[string][]string{}},
		queries:   &queryLog{count: map[string]int{}},
		logs:      &syncbuffer.Buffer{},
	}
	var keys []ServiceKey
	for i := range n {
		name := fmt.Sprintf("svc%02d", i)
		o.agent.RegisterTTL(t, name, name+"-1", 9000+i, nil, nil)
		keys = append(keys, ServiceKey{Name: name})
	}
	client, err := api.NewClient(&api.Config{Address: o.agent.HTTPAddr(), Scheme: "http", HttpClient: &http.Client{Transport: o.transport}})
	if err != nil {
		t.Fatal(err)
	}
	o.w = NewWatcher(Config{
		Client: client, Query: q, MaxQueries: maxQueries,
		Targets: Targets{Services: keys},
		Logger:  zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), o.logs)),
		OnQuery: o.queries.record,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = o.w.Run(ctx); close(done) }()
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		for ctx.Err() == nil {
			slots, inUse, waiting := o.w.QueryStats()
			o.statsMu.Lock()
			o.samples++
			if o.statsErr == "" && (slots != maxQueries || inUse > maxQueries || inUse < 0 || waiting < 0) {
				o.statsErr = fmt.Sprintf("QueryStats() = %d, %d, %d with MaxQueries %d", slots, inUse, waiting, maxQueries)
			}
			o.statsMu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var once sync.Once
	o.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Error("watcher did not stop")
			}
			<-sampling
		})
	}
	t.Cleanup(o.stop)
	return o
}

// check stops the watcher and fails the test if the budget was ever broken
// or any request failed.
// setHealth sets the TTL check of svc's one instance to check and waits
// (5 s at most) until the published catalog shows want; it returns how
// long that took.
func (o *oversubscribed) setHealth(t *testing.T, svc, check string, want Status) time.Duration {
	t.Helper()
	start := time.Now()
	o.agent.SetTTL(t, "service:"+svc+"-1", check)
	waitFor(t, o.w, 5*time.Second, svc+" "+string(want), func(u Update) bool {
		s := u.Catalog.Service("", svc)
		return s != nil && len(s.Instances) == 1 && s.Instances[0].Status == want
	})
	return time.Since(start)
}

func (o *oversubscribed) check(t *testing.T, maxQueries int) {
	t.Helper()
	// A test may end within milliseconds (a flip is published at once);
	// let the sampler take its samples first (bounded) on a loaded machine.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		o.statsMu.Lock()
		n := o.samples
		o.statsMu.Unlock()
		if n >= 10 {
			break
		}
	}
	o.stop()
	o.statsMu.Lock()
	defer o.statsMu.Unlock()
	if o.statsErr != "" {
		t.Error(o.statsErr)
	}
	if o.samples < 10 {
		t.Errorf("only %d QueryStats samples; the test proves little", o.samples)
	}
	o.transport.mu.Lock()
	most := o.transport.most
	o.transport.mu.Unlock()
	if most > maxQueries {
		t.Errorf("%d requests (the service list aside) were in flight at once with MaxQueries %d", most, maxQueries)
	}
	counts, errs := o.queries.snapshot()
	if len(errs) > 0 {
		t.Errorf("%d requests failed, e.g. %s", len(errs), errs[0])
	}
	if strings.Contains(o.logs.String(), "consul query failed") {
		t.Error("the watcher logged failed queries")
	}
	t.Logf("requests by endpoint %v, at most %d in flight of %d slots", counts, most, maxQueries)
}

// waitFor waits up to d for an update satisfying pred.
func waitFor(t *testing.T, w *Watcher, d time.Duration, what string, pred func(Update) bool) Update {
	t.Helper()
	return awaitUpdate(t, w.Updates(), d, what, pred)
}

// awaitUpdate reads updates from ch until one satisfies pred, failing the
// test after d.
func awaitUpdate[U any](t *testing.T, ch <-chan U, d time.Duration, what string, pred func(U) bool) U {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case u := <-ch:
			if pred(u) {
				return u
			}
		case <-timeout:
			t.Fatalf("no update with %s within %v", what, d)
		}
	}
}

func allPassing(n int) func(Update) bool {
	return func(u Update) bool {
		if !u.Complete || len(u.Catalog.Services) != n {
			return false
		}
		for _, s := range u.Catalog.Services {
			if len(s.Instances) != 1 || s.Instances[0].Status != StatusPassing {
				return false
			}
		}
		return true
	}
}

func TestWatcherOversubscribedAgainstConsul(t *testing.T) {
	t.Parallel()
	const services, slots = 24, 3
	// Of 3 slots, the hint view has one and one is left for hurried reads:
	// 25 views take turns on the last, each for a WaitTime share (10s / 25)
	// raised to the 2s floor, so several turns pass during the test.
	q := QueryOptions{WaitTime: 10 * time.Second}
	o := startOversubscribed(t, services, slots, q)

	start := time.Now()
	waitFor(t, o.w, 30*time.Second, "every service read", allPassing(services))
	t.Logf("first complete update after %v", time.Since(start).Round(time.Millisecond))

	// Let the views take turns: each holds a slot for its shortened wait,
	// then queues again behind the others.
	time.Sleep(7 * time.Second)
	if _, _, waiting := o.w.QueryStats(); waiting < services-slots {
		t.Errorf("only %d queries wait for a slot; the watcher is not oversubscribed", waiting)
	}
	o.check(t, slots)

	counts, _ := o.queries.snapshot()
	// The initial reads, then a turn every 2s.
	if counts["health_service"] < services+2 {
		t.Errorf("%d health requests: the views did not take turns", counts["health_service"])
	}
	if counts["health_state"] == 0 || counts["catalog_services"] == 0 {
		t.Errorf("requests by endpoint %v, want the hint and catalog views reported too", counts)
	}
	o.transport.mu.Lock()
	healthWaits := o.transport.waits["/v1/health/service/svc05"]
	hintWaits := o.transport.waits["/v1/health/state/any"]
	o.transport.mu.Unlock()
	for _, w := range healthWaits {
		if w != "2000ms" {
			t.Errorf("a blocking health query waited %s, want the shortened 2000ms", w)
		}
	}
	for _, w := range hintWaits {
		if w != "10000ms" {
			t.Errorf("the hint query waited %s, want the full 10000ms", w)
		}
	}

	var warnings int
	for line := range strings.SplitSeq(o.logs.String(), "\n") {
		if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, "oversubscribed") {
			warnings++
			if !strings.Contains(line, `"max_queries":3`) || !strings.Contains(line, "raise consul.max_queries") {
				t.Errorf("oversubscription warning lacks the numbers or the remedy: %s", line)
			}
		}
	}
	if warnings != 1 {
		t.Errorf("%d oversubscription warnings, want 1", warnings)
	}
}

// TestWatcherHealthHintsAgainstConsul: a health change to a service whose
// view waits its turn is published at once, through the hint queries:
// with 4 slots or more the two status-indexed ones (critical, warning),
// which cost Consul the checks in that state; with fewer the one over
// every check, filtered. A change to warning is hinted too.
func TestWatcherHealthHintsAgainstConsul(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		slots      int
		hints, not []string
	}{
		{3, []string{"/v1/health/state/any"}, []string{"/v1/health/state/critical", "/v1/health/state/warning"}},
		{5, []string{"/v1/health/state/critical", "/v1/health/state/warning"}, []string{"/v1/health/state/any"}},
	} {
		t.Run(fmt.Sprintf("%d slots", tc.slots), func(t *testing.T) {
			t.Parallel()
			testHealthHints(t, tc.slots, tc.hints, tc.not)
		})
	}
}

func testHealthHints(t *testing.T, slots int, hints, not []string) {
	const services = 24
	// The default wait: a view that waits for its turn behind the others
	// would see a change only after most of a minute without hints.
	o := startOversubscribed(t, services, slots, QueryOptions{})
	waitFor(t, o.w, 30*time.Second, "every service read", allPassing(services))

	// The hint views must have their baselines, and the health views must
	// be taking turns, before a change means anything.
	settled := func() []string {
		deadline := time.Now().Add(30 * time.Second)
		for {
			q := o.w.slots.queued()
			ready := len(q) >= services-slots
			for _, h := range hints {
				ready = ready && o.transport.requests(h) >= 2
			}
			if ready {
				return q
			}
			if time.Now().After(deadline) {
				t.Fatalf("watcher did not settle: queue %v", q)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// lastWaiting returns the service of the health view served last.
	lastWaiting := func(q []string) string {
		for _, id := range slices.Backward(q) {
			if name, ok := strings.CutPrefix(id, "health("); ok {
				return strings.TrimSuffix(name, ")")
			}
		}
		t.Fatalf("no health view waits: %v", q)
		return ""
	}
	flip := func(name, check string, want Status) {
		t.Helper()
		// Under load the queue may turn between reading it and flipping:
		// wait (bounded) until name is last again.
		q := settled()
		for deadline := time.Now().Add(10 * time.Second); lastWaiting(q) != name; q = settled() {
			if time.Now().After(deadline) {
				t.Fatalf("%s is not the last view waiting: %v", name, q)
			}
			time.Sleep(5 * time.Millisecond)
		}
		took := o.setHealth(t, name, check, want)
		t.Logf("%s turned %s in the published catalog %v after the check changed; it was last of %d queries waiting for %d slots",
			name, want, took.Round(time.Millisecond), len(q), slots)
	}

	name := lastWaiting(settled())
	for _, st := range []struct {
		check string
		want  Status
	}{{api.HealthCritical, StatusCritical}, {api.HealthPassing, StatusPassing}, {api.HealthWarning, StatusWarning}, {api.HealthPassing, StatusPassing}} {
		flip(name, st.check, st.want)
		// After its hurried read it queues at the back again.
		deadline := time.Now().Add(10 * time.Second)
		for lastWaiting(settled()) != name {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not queue again: %v", name, o.w.slots.queued())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, path := range not {
		if n := o.transport.requests(path); n != 0 {
			t.Errorf("%d requests to %s with %d slots, want 0 (hints: %v)", n, path, slots, hints)
		}
	}
	o.check(t, slots)
}

// TestWatcherWithoutTurnsHasNoHintQuery: when every service has a slot of
// its own, each blocking query sees its changes itself, so no health-state
// query runs (it would double the requests per change), and a flip is
// still published at once.
func TestWatcherWithoutTurnsHasNoHintQuery(t *testing.T) {
	t.Parallel()
	const services, slots = 4, 10
	// Through the agent cache, as the daemon reads by default.
	o := startOversubscribed(t, services, slots, QueryOptions{UseCache: true})
	waitFor(t, o.w, 30*time.Second, "every service read", allPassing(services))
	took := o.setHealth(t, "svc01", api.HealthCritical, StatusCritical)
	t.Logf("flip published after %v", took.Round(time.Millisecond))
	if n := o.transport.requests("/v1/health/state/any"); n != 0 {
		t.Errorf("%d health-state requests with a slot for every service, want 0", n)
	}
	o.transport.mu.Lock()
	cached := o.transport.cached
	o.transport.mu.Unlock()
	if cached < services {
		t.Errorf("%d health requests went through the agent cache, want every one (at least %d)", cached, services)
	}
	o.check(t, slots)
}
