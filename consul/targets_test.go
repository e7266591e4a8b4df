package consul

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
)

func TestTargetsNormalise(t *testing.T) {
	tests := map[string]struct {
		in   []ServiceKey
		want []ServiceKey
	}{
		"sorted and deduplicated": {
			in:   []ServiceKey{{Name: "web"}, {Datacenter: "dc2", Name: "api"}, {Name: "api"}, {Name: "web"}},
			want: []ServiceKey{{Name: "api"}, {Name: "web"}, {Datacenter: "dc2", Name: "api"}},
		},
		"nameless keys are dropped": {
			in:   []ServiceKey{{Datacenter: "dc2"}, {}},
			want: []ServiceKey{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			got := Targets{Services: in}.normalise().Services
			if !slices.Equal(got, tc.want) {
				t.Fatalf("normalise(%v) = %v, want %v", tc.in, got, tc.want)
			}
			if !slices.Equal(in, tc.in) {
				t.Fatalf("normalise changed the caller's slice: %v", in)
			}
		})
	}
}

// assertNoRequests fails if resource is queried again once in-flight
// requests have had time to end, even when its data changes.
func assertNoRequests(t *testing.T, f *fakeConsul, resource string, body any) {
	t.Helper()
	time.Sleep(100 * time.Millisecond)
	before := len(f.requests(resource))
	f.set(resource, 1000, body) // would wake a live watch
	time.Sleep(700 * time.Millisecond)
	if after := len(f.requests(resource)); after != before {
		t.Fatalf("%s still polled: %d -> %d requests", resource, before, after)
	}
}

func TestWatcherSetTargetsWatchesUnlistedServiceUntilRemoved(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set("/v1/catalog/services", 10, map[string][]string{"web": nil})
	f.set("/v1/health/service/web", 11, []*api.ServiceEntry{entry("n1", "10.0.0.1", "web-1", 80, "passing")})
	w, _ := startWatcher(t, c, Targets{AllLocal: true})
	next(t, w, "complete", func(u Update) bool { return u.Complete })

	// A policy names api before it registers; until its health is read
	// (the fake answers 404 for now) the update says what is missing.
	apiKey := ServiceKey{Name: "api"}
	w.SetTargets(Targets{AllLocal: true, Services: []ServiceKey{apiKey}})
	u := next(t, w, "api pending", func(u Update) bool { return !u.Complete })
	if !slices.Equal(u.Pending, []ServiceKey{apiKey}) {
		t.Fatalf("pending = %v, want [api]", u.Pending)
	}
	if got := instanceIDs(u.Catalog, "web"); got != "web-1=passing" {
		t.Fatalf("web while api is pending = %s", got)
	}
	if u.Catalog.Service("", "api") != nil {
		t.Fatal("api served before its health was read")
	}

	// Consul answers a service nobody registered with an empty list.
	f.set("/v1/health/service/api", 12, []*api.ServiceEntry{})
	u = next(t, w, "complete with api", func(u Update) bool { return u.Complete })
	if s := u.Catalog.Service("", "api"); s == nil || len(s.Instances) != 0 {
		t.Fatalf("api = %+v, want it present with no instances", s)
	}
	if len(u.Pending) != 0 {
		t.Fatalf("pending = %v in a complete update", u.Pending)
	}

	w.SetTargets(Targets{AllLocal: true})
	u = next(t, w, "api gone", func(u Update) bool { return u.Catalog.Service("", "api") == nil })
	if !u.Complete || instanceIDs(u.Catalog, "web") != "web-1=passing" {
		t.Fatalf("after removing api: complete=%v web=%s", u.Complete, instanceIDs(u.Catalog, "web"))
	}
	assertNoRequests(t, f, "/v1/health/service/api", []*api.ServiceEntry{entry("n1", "10.0.0.1", "api-1", 90, "passing")})
}

func TestWatcherSetTargetsSameSetPublishesNothing(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set("/v1/catalog/services", 10, map[string][]string{"web": nil, "api": nil})
	f.set("/v1/health/service/web", 11, []*api.ServiceEntry{entry("n1", "10.0.0.1", "web-1", 80, "passing")})
	f.set("/v1/health/service/api", 12, []*api.ServiceEntry{entry("n1", "10.0.0.1", "api-1", 81, "passing")})
	w, _ := startWatcher(t, c, Targets{Services: []ServiceKey{{Name: "api"}, {Name: "web"}}})
	next(t, w, "complete", func(u Update) bool { return u.Complete })
	// A policy reload that references the same services, in another order
	// and with a repeat.
	w.SetTargets(Targets{Services: []ServiceKey{{Name: "web"}, {Name: "api"}, {Name: "web"}}})
	select {
	case u := <-w.Updates():
		t.Fatalf("update published for unchanged targets: %+v", u)
	case <-time.After(300 * time.Millisecond):
	}
}

func TestWatcherWithoutAllLocalWatchesOnlyTargets(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set("/v1/catalog/services", 10, map[string][]string{"web": nil, "api": nil})
	f.set("/v1/health/service/web", 11, []*api.ServiceEntry{entry("n1", "10.0.0.1", "web-1", 80, "passing")})
	f.set("/v1/health/service/api", 12, []*api.ServiceEntry{entry("n1", "10.0.0.1", "api-1", 90, "passing")})
	w, _ := startWatcher(t, c, Targets{Services: []ServiceKey{{Name: "web"}}})
	u := next(t, w, "complete", func(u Update) bool { return u.Complete })
	if len(u.Catalog.Services) != 1 || instanceIDs(u.Catalog, "web") != "web-1=passing" {
		t.Fatalf("catalog = %+v, want only web", u.Catalog.Services)
	}
	if n := len(f.requests("/v1/health/service/api")); n != 0 {
		t.Fatalf("api, listed but not targeted, was queried %d times", n)
	}
}

func TestWatcherRemoteDatacenterTarget(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set("/v1/catalog/services", 10, map[string][]string{"web": nil})
	f.set("/v1/health/service/api?dc=dc2", 20, []*api.ServiceEntry{entry("n9", "10.2.0.1", "api-1", 90, "passing")})
	key := ServiceKey{Datacenter: "dc2", Name: "api"}
	w, _ := startWatcher(t, c, Targets{Services: []ServiceKey{key}})
	u := next(t, w, "complete", func(u Update) bool { return u.Complete })
	s := u.Catalog.Service("dc2", "api")
	if s == nil || s.Datacenter != "dc2" || len(s.Instances) != 1 || s.Instances[0].ID != "api-1" {
		t.Fatalf("api@dc2 = %+v", s)
	}
	if len(u.Catalog.Services) != 1 || len(u.Unreachable) != 0 {
		t.Fatalf("catalog = %+v, unreachable = %v; want only api@dc2", u.Catalog.Services, u.Unreachable)
	}
	reqs := f.requests("/v1/health/service/api?dc=dc2")
	if len(reqs) == 0 || reqs[0].query.Get("dc") != "dc2" {
		t.Fatalf("requests for api in dc2: %+v", reqs)
	}
	if n := len(f.requests("/v1/health/service/api")); n != 0 {
		t.Fatalf("api queried %d times in the local datacenter", n)
	}
	// The catalog list stays local: the remote datacenter is only a target.
	if reqs := f.requests("/v1/catalog/services"); len(reqs) == 0 || reqs[0].query.Has("dc") {
		t.Fatalf("catalog requests: %+v", reqs)
	}
}

func TestWatcherLocalDatacenterByName(t *testing.T) {
	// A policy may name the local datacenter; the consumer then looks the
	// service up under that name, and a failure there is a local outage,
	// never a reason to serve the service empty.
	f, c := newFakeConsul(t)
	f.set("/v1/catalog/services?dc=dc1", 10, map[string][]string{"web": nil})
	f.set("/v1/health/service/web?dc=dc1", 11, []*api.ServiceEntry{entry("n1", "10.0.0.1", "web-1", 80, "passing")})
	f.failWith("/v1/health/service/api?dc=dc1", 1000, http.StatusInternalServerError, "rpc error: no leader")
	q := testQuery()
	q.Datacenter = "dc1"
	w := NewWatcher(Config{
		Client: c, Query: q, Logger: zerolog.New(zerolog.NewTestWriter(t)),
		Targets: Targets{AllLocal: true, Services: []ServiceKey{{Datacenter: "dc1", Name: "web"}, {Datacenter: "dc1", Name: "api"}}},
	})
	runInBackground(t, w.Run)
	u := next(t, w, "web both ways", func(u Update) bool {
		return u.Catalog.Service("", "web") != nil && u.Catalog.Service("dc1", "web") != nil
	})
	if s := u.Catalog.Service("dc1", "web"); len(s.Instances) != 1 || s.Datacenter != "dc1" {
		t.Fatalf("web@dc1 = %+v", s)
	}
	time.Sleep(300 * time.Millisecond) // several failures of api@dc1
	select {
	case u = <-w.Updates(): // only the newest is kept
	default:
	}
	if u.Complete || len(u.Unreachable) != 0 || !slices.Equal(u.Pending, []ServiceKey{{Datacenter: "dc1", Name: "api"}}) {
		t.Fatalf("failing local api: complete %v, pending %v, unreachable %v", u.Complete, u.Pending, u.Unreachable)
	}
}

func TestWatcherUnreachableDatacenterDoesNotBlockCompleteness(t *testing.T) {
	const remote = "/v1/health/service/api?dc=dc3"
	f, c := newFakeConsul(t)
	f.set("/v1/catalog/services", 10, map[string][]string{"web": nil})
	f.set("/v1/health/service/web", 11, []*api.ServiceEntry{entry("n1", "10.0.0.1", "web-1", 80, "passing")})
	f.failWith(remote, 1000, http.StatusInternalServerError, "No path to datacenter")
	key := ServiceKey{Datacenter: "dc3", Name: "api"}
	w, _ := startWatcher(t, c, Targets{AllLocal: true, Services: []ServiceKey{key}})

	u := next(t, w, "complete", func(u Update) bool { return u.Complete })
	if s := u.Catalog.Service("dc3", "api"); s == nil || len(s.Instances) != 0 {
		t.Fatalf("api@dc3 = %+v, want present and empty", s)
	}
	if !slices.Equal(u.Unreachable, []ServiceKey{key}) || len(u.Pending) != 0 {
		t.Fatalf("unreachable = %v, pending = %v", u.Unreachable, u.Pending)
	}
	if got := instanceIDs(u.Catalog, "web"); got != "web-1=passing" {
		t.Fatalf("web = %s", got)
	}

	// The datacenter answers again.
	f.failWith(remote, 0, 0, "")
	f.set(remote, 30, []*api.ServiceEntry{entry("n9", "10.3.0.1", "api-1", 90, "passing")})
	u = next(t, w, "api@dc3 read", func(u Update) bool {
		s := u.Catalog.Service("dc3", "api")
		return s != nil && len(s.Instances) == 1
	})
	if len(u.Unreachable) != 0 || !u.Complete {
		t.Fatalf("after recovery: unreachable = %v, complete = %v", u.Unreachable, u.Complete)
	}

	// And goes away again: now its last good data stands.
	f.failWith(remote, 1000, http.StatusInternalServerError, "No path to datacenter")
	start := time.Now()
	f.set(remote, 31, []*api.ServiceEntry{}) // wakes the blocked query into the failures
	watchFor := time.After(700 * time.Millisecond)
loop:
	for {
		select {
		case u := <-w.Updates():
			if s := u.Catalog.Service("dc3", "api"); s == nil || len(s.Instances) != 1 || len(u.Unreachable) != 0 {
				t.Fatalf("published a changed api@dc3 during errors: %+v, unreachable %v", s, u.Unreachable)
			}
		case <-watchFor:
			break loop
		}
	}
	var failed int
	for _, r := range f.requests(remote) {
		if r.at.After(start) {
			failed++
		}
	}
	if failed < 2 {
		t.Fatalf("only %d requests after the datacenter went away; the test proves nothing", failed)
	}
}

func TestWatcherRemoteTargetWaitsForASilentAgent(t *testing.T) {
	// No answer at all points at the local agent, not the remote
	// datacenter: the service stays pending instead of turning empty.
	const remote = "/v1/health/service/api?dc=dc3"
	f, c := newFakeConsul(t)
	f.set("/v1/catalog/services", 10, map[string][]string{})
	f.failWith(remote, 1000, 0, "")
	key := ServiceKey{Datacenter: "dc3", Name: "api"}
	w, _ := startWatcher(t, c, Targets{Services: []ServiceKey{key}})
	var sawPending bool
	deadline := time.After(700 * time.Millisecond)
	for {
		select {
		case u := <-w.Updates():
			if u.Complete || u.Catalog.Service("dc3", "api") != nil {
				t.Fatalf("remote service given up on after dropped connections: %+v", u)
			}
			sawPending = sawPending || slices.Equal(u.Pending, []ServiceKey{key})
		case <-deadline:
			if n := len(f.requests(remote)); n < 2 || !sawPending {
				t.Fatalf("%d requests, saw it pending: %v; the test proves nothing", n, sawPending)
			}
			return
		}
	}
}
