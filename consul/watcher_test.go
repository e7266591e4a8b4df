package consul

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
)

// fakeConsul imitates Consul's blocking-query semantics closely enough to
// test the watch loop: each resource has an index and a body; a request whose
// ?index equals the current index blocks until a change or its wait ends.
// A resource is named by its path, plus "?dc=NAME" when the request has a
// dc parameter, so each datacenter has its own data.
type fakeConsul struct {
	t  *testing.T
	mu sync.Mutex
	// per resource
	index   map[string]uint64
	body    map[string]any
	fail    map[string]failure
	changed chan struct{}
	reqs    []request
}

// failure answers the next n requests of a resource with an error status.
type failure struct {
	n    int
	code int
	msg  string
}

// notFound as a body answers 404 with the index, as Consul does for a KV
// prefix with no keys.
type notFound struct{}

type request struct {
	resource string
	index    uint64
	query    url.Values
	at       time.Time // when it came
	failed   bool      // answered with a failure (failNext, failWith)
}

// fromFirstFailure is reqs from the first that was answered with a
// failure: a query already blocked when the failures were set fails once
// woken, so counting from when they were set misses it whenever the
// query came first (as it does on a loaded machine).
func fromFirstFailure(reqs []request) []request {
	for i, r := range reqs {
		if r.failed {
			return reqs[i:]
		}
	}
	return nil
}

func newFakeConsul(t *testing.T) (*fakeConsul, *api.Client) {
	f := &fakeConsul{t: t, index: map[string]uint64{}, body: map[string]any{}, fail: map[string]failure{}, changed: make(chan struct{})}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	cfg := api.DefaultConfig()
	cfg.Address = strings.TrimPrefix(srv.URL, "http://")
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

func (f *fakeConsul) set(resource string, index uint64, body any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index[resource], f.body[resource] = index, body
	f.wake()
}

// wake ends every blocked query's wait; f.mu must be held.
func (f *fakeConsul) wake() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeConsul) failNext(resource string, n int) {
	f.failWith(resource, n, http.StatusInternalServerError, "rpc error: no leader")
}

// failWith answers the next n requests of resource with code and msg, or,
// with code 0, by closing the connection without an answer.
func (f *fakeConsul) failWith(resource string, n, code int, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[resource] = failure{n: n, code: code, msg: msg}
}

func (f *fakeConsul) requests(resource string) []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []request
	for _, r := range f.reqs {
		if r.resource == resource {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeConsul) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	idx, _ := strconv.ParseUint(q.Get("index"), 10, 64)
	wait, err := time.ParseDuration(q.Get("wait"))
	if err != nil {
		wait = time.Second
	}
	res := r.URL.Path
	if dc := q.Get("dc"); dc != "" {
		res += "?dc=" + dc
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, request{resource: res, index: idx, query: q, at: time.Now()})
	rec := len(f.reqs) - 1
	// failed answers with a failure set for res, if any; f.mu is held
	// and, if it answered, released. A query blocked when the failure is
	// set fails too once woken, as a forwarded query does when the path
	// to its datacenter breaks.
	failed := func() bool {
		fl := f.fail[res]
		if fl.n <= 0 {
			return false
		}
		fl.n--
		f.fail[res] = fl
		f.reqs[rec].failed = true
		f.mu.Unlock()
		if fl.code == 0 {
			// No answer at all, like an agent that went away.
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return true
		}
		http.Error(w, fl.msg, fl.code)
		return true
	}
	if failed() {
		return
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	// Like Consul, block while the data's index is not past the one asked
	// for; an index that went backwards therefore blocks until the wait ends.
wait:
	for idx != 0 && f.index[res] <= idx {
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
			f.mu.Lock()
			if failed() {
				return
			}
		case <-timer.C:
			f.mu.Lock()
			break wait
		case <-r.Context().Done():
			return
		}
	}
	body, ok := f.body[res]
	cur := f.index[res]
	f.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("X-Consul-Index", strconv.FormatUint(cur, 10))
	w.Header().Set("X-Consul-KnownLeader", "true")
	if _, ok := body.(notFound); ok {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	_ = json.NewEncoder(w).Encode(body)
}

func entry(node, addr, id string, port int, status string) *api.ServiceEntry {
	return &api.ServiceEntry{
		Node:    &api.Node{Node: node, Address: addr, Datacenter: "dc1"},
		Service: &api.AgentService{ID: id, Service: strings.Split(id, "-")[0], Port: port, Weights: api.AgentWeights{Passing: 1, Warning: 1}},
		Checks:  api.HealthChecks{{CheckID: "service:" + id, Status: status}},
	}
}

func testQuery() QueryOptions {
	return QueryOptions{WaitTime: 300 * time.Millisecond, MinInterval: 5 * time.Millisecond, BackoffInitial: 50 * time.Millisecond, BackoffMax: 400 * time.Millisecond}
}

func startWatcher(t *testing.T, c *api.Client, targets Targets) (*Watcher, context.CancelFunc) {
	w := NewWatcher(Config{Client: c, Query: testQuery(), Targets: targets, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	return w, runInBackground(t, w.Run)
}

// runInBackground runs a watcher until the test ends, and fails the test if
// it does not stop when told to.
func runInBackground(t *testing.T, run func(context.Context) error) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("watcher did not stop")
		}
	})
	return cancel
}

// next waits for an update satisfying pred, failing after a generous bound.
func next(t *testing.T, w *Watcher, what string, pred func(Update) bool) Update {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case u := <-w.Updates():
			if pred(u) {
				return u
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func instanceIDs(c *Catalog, name string) string {
	s := c.Service("", name)
	if s == nil {
		return "<none>"
	}
	var ids []string
	for _, in := range s.Instances {
		ids = append(ids, in.ID+"="+string(in.Status))
	}
	return strings.Join(ids, ",")
}

func TestWatcherCompleteOnlyAfterEveryServiceLoaded(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set("/v1/catalog/services", 10, map[string][]string{"web": nil, "api": nil})
	f.set("/v1/health/service/web", 11, []*api.ServiceEntry{entry("n1", "10.0.0.1", "web-1", 80, "passing")})
	// api's health is not there yet: the catalog must not be complete.
	w, _ := startWatcher(t, c, Targets{AllLocal: true})
	u := next(t, w, "web loaded", func(u Update) bool { return u.Catalog.Service("", "web") != nil })
	if u.Complete {
		t.Fatalf("update complete although api's health was never read: %+v", u.Catalog)
	}
	f.set("/v1/health/service/api", 12, []*api.ServiceEntry{entry("n1", "10.0.0.1", "api-1", 90, "critical")})
	u = next(t, w, "complete", func(u Update) bool { return u.Complete })
	if got := instanceIDs(u.Catalog, "api"); got != "api-1=critical" {
		t.Fatalf("api instances = %s", got)
	}
	if got := instanceIDs(u.Catalog, "web"); got != "web-1=passing" {
		t.Fatalf("web instances = %s", got)
	}
}

func TestWatcherIndexGoingBackwardsResets(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set("/v1/catalog/services", 10, map[string][]string{"web": nil})
	f.set("/v1/health/service/web", 500, []*api.ServiceEntry{entry("n1", "10.0.0.1", "web-1", 80, "passing")})
	w, _ := startWatcher(t, c, Targets{AllLocal: true})
	next(t, w, "complete", func(u Update) bool { return u.Complete })

	// A snapshot restore: the index drops and the data changes.
	f.set("/v1/health/service/web", 7, []*api.ServiceEntry{entry("n1", "10.0.0.1", "web-1", 80, "critical")})
	u := next(t, w, "critical after reset", func(u Update) bool { return instanceIDs(u.Catalog, "web") == "web-1=critical" })
	if !u.Complete {
		t.Fatal("update after reset lost completeness")
	}
	// The request after the backwards index must use index 0, and the one
	// after that the new index 7, so blocking resumes.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		reqs := f.requests("/v1/health/service/web")
		for i := 1; i < len(reqs); i++ {
			if reqs[i-1].index == 500 && reqs[i].index == 0 && i+1 < len(reqs) && reqs[i+1].index == 7 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no 500 -> 0 -> 7 index sequence in %+v", f.requests("/v1/health/service/web"))
}

func TestWatcherNeverBlocksOnIndexZero(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set("/v1/catalog/services", 0, map[string][]string{})
	w, _ := startWatcher(t, c, Targets{AllLocal: true})
	next(t, w, "complete", func(u Update) bool { return u.Complete })
	time.Sleep(400 * time.Millisecond)
	reqs := f.requests("/v1/catalog/services")
	// With index 0 sanitised to 1, each call blocks for the wait time; a
	// busy loop would make hundreds of calls.
	if len(reqs) > 6 {
		t.Fatalf("%d requests in ~0.4s: busy loop on index 0", len(reqs))
	}
	if len(reqs) < 2 || reqs[1].index != 1 {
		t.Fatalf("second request should block on index 1: %+v", reqs)
	}
}

func TestWatcherBacksOffOnErrorsAndKeepsLastGood(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set("/v1/catalog/services", 10, map[string][]string{"web": nil})
	f.set("/v1/health/service/web", 20, []*api.ServiceEntry{
		entry("n1", "10.0.0.1", "web-1", 80, "passing"), entry("n1", "10.0.0.1", "web-2", 81, "passing"),
	})
	w, _ := startWatcher(t, c, Targets{AllLocal: true})
	next(t, w, "complete", func(u Update) bool { return u.Complete })

	f.failNext("/v1/health/service/web", 5)
	f.failNext("/v1/catalog/services", 5)
	// Wake the blocked queries so they hit the failures.
	f.set("/v1/health/service/web", 21, []*api.ServiceEntry{
		entry("n1", "10.0.0.1", "web-1", 80, "passing"), entry("n1", "10.0.0.1", "web-2", 81, "passing"),
	})
	f.set("/v1/catalog/services", 11, map[string][]string{"web": nil})
	// While failing, nothing may be published that lacks web's instances.
	watchFor := time.After(500 * time.Millisecond)
loop:
	for {
		select {
		case u := <-w.Updates():
			if got := instanceIDs(u.Catalog, "web"); got != "web-1=passing,web-2=passing" {
				t.Fatalf("published a changed world during errors: %s", got)
			}
		case <-watchFor:
			break loop
		}
	}
	// Recovery: a real change flows again.
	f.set("/v1/health/service/web", 30, []*api.ServiceEntry{entry("n1", "10.0.0.1", "web-1", 80, "passing")})
	next(t, w, "change after recovery", func(u Update) bool { return instanceIDs(u.Catalog, "web") == "web-1=passing" })

	attempts := fromFirstFailure(f.requests("/v1/health/service/web"))
	if len(attempts) < 6 {
		t.Fatalf("expected 5 failures and a success, got %d requests from the first failure: %+v", len(attempts), attempts)
	}
	for i, r := range attempts[:6] {
		if r.failed != (i < 5) {
			t.Fatalf("attempt %d failed=%v, want 5 failures and then a success: %+v", i+1, r.failed, attempts)
		}
	}
	// Exponential backoff from 50ms with 50% jitter: the gap before the 5th
	// retry is at least 50ms*2^3*0.5 = 200ms, far above the 5ms floor.
	if gap := attempts[5].at.Sub(attempts[4].at); gap < 150*time.Millisecond {
		t.Fatalf("no backoff: gap between 5th and 6th attempt is %v", gap)
	}
}

func TestWatcherStopsWatchOfDeregisteredService(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set("/v1/catalog/services", 10, map[string][]string{"web": nil, "api": nil})
	f.set("/v1/health/service/web", 11, []*api.ServiceEntry{entry("n1", "10.0.0.1", "web-1", 80, "passing")})
	f.set("/v1/health/service/api", 12, []*api.ServiceEntry{entry("n1", "10.0.0.1", "api-1", 90, "passing")})
	w, _ := startWatcher(t, c, Targets{AllLocal: true})
	next(t, w, "complete", func(u Update) bool { return u.Complete && u.Catalog.Service("", "api") != nil })

	f.set("/v1/catalog/services", 13, map[string][]string{"web": nil})
	u := next(t, w, "api gone", func(u Update) bool { return u.Catalog.Service("", "api") == nil })
	if !u.Complete || u.Catalog.Service("", "web") == nil {
		t.Fatalf("web lost along with api: %+v", u)
	}
	// Let any in-flight request finish, then no new api request may start.
	time.Sleep(100 * time.Millisecond)
	before := len(f.requests("/v1/health/service/api"))
	f.set("/v1/health/service/api", 14, []*api.ServiceEntry{}) // would wake a live watch
	time.Sleep(700 * time.Millisecond)
	if after := len(f.requests("/v1/health/service/api")); after != before {
		t.Fatalf("api health still polled after deregistration: %d -> %d requests", before, after)
	}
}

func TestWatcherDropsUnchangedData(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set("/v1/catalog/services", 10, map[string][]string{"web": nil})
	f.set("/v1/health/service/web", 11, []*api.ServiceEntry{entry("n1", "10.0.0.1", "web-1", 80, "passing")})
	w, _ := startWatcher(t, c, Targets{AllLocal: true})
	next(t, w, "complete", func(u Update) bool { return u.Complete })
	for i := range 5 {
		// Index moves (e.g. a TTL heartbeat updating output) but data doesn't.
		f.set("/v1/health/service/web", uint64(12+i), []*api.ServiceEntry{entry("n1", "10.0.0.1", "web-1", 80, "passing")})
		time.Sleep(30 * time.Millisecond)
	}
	select {
	case u := <-w.Updates():
		t.Fatalf("update published for unchanged data: %s", fmt.Sprint(instanceIDs(u.Catalog, "web")))
	case <-time.After(300 * time.Millisecond):
	}
}

// TestWatcherOneFailingServiceKeepsItsDataOthersUpdate: partial failure.
// A service whose health query fails keeps its last good instances while
// another service's change still flows.
func TestWatcherOneFailingServiceKeepsItsDataOthersUpdate(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set("/v1/catalog/services", 10, map[string][]string{"web": nil, "api": nil})
	f.set("/v1/health/service/web", 11, []*api.ServiceEntry{entry("n1", "10.0.0.1", "web-1", 80, "passing")})
	f.set("/v1/health/service/api", 12, []*api.ServiceEntry{entry("n1", "10.0.0.1", "api-1", 90, "passing")})
	w, _ := startWatcher(t, c, Targets{AllLocal: true})
	next(t, w, "complete", func(u Update) bool { return u.Complete })

	f.failNext("/v1/health/service/web", 1000)
	// Wake web's blocked query so the next ones fail, then change api. A
	// query already blocked when the failures begin answers with data, so
	// the wake carries web's data unchanged: what web shows while failing
	// is its last good state whether its query was in flight or not.
	f.set("/v1/health/service/web", 13, []*api.ServiceEntry{entry("n1", "10.0.0.1", "web-1", 80, "passing")})
	time.Sleep(200 * time.Millisecond)
	f.set("/v1/health/service/api", 14, []*api.ServiceEntry{
		entry("n1", "10.0.0.1", "api-1", 90, "passing"), entry("n2", "10.0.0.2", "api-2", 90, "passing"),
	})
	u := next(t, w, "api's change", func(u Update) bool { return instanceIDs(u.Catalog, "api") == "api-1=passing,api-2=passing" })
	if got := instanceIDs(u.Catalog, "web"); got != "web-1=passing" {
		t.Fatalf("web while its query fails = %s, want its last good web-1", got)
	}
	if len(f.requests("/v1/health/service/web")) < 3 {
		t.Fatal("web's query was not retried")
	}
}
