package serve

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
)

// TestDeltaACKComparesOnlyWhatChanged: a delta stream's ACK is checked
// against the names that changed since the set it was brought up to date
// with (the mark in what it holds), so changes that land while a response
// is in flight reach it after the ACK, one change or several, and a
// request that subscribes new names gets them.
func TestDeltaACKComparesOnlyWhatChanged(t *testing.T) {
	out := testOutput(t, []string{"api", "web", "db", "cache"}, 8080)
	s := newCacheServer(t, out)
	update := func(i int, port uint32) {
		t.Helper()
		out = withEndpointPort(out, i, port)
		if _, err := s.Update(context.Background(), out, resolveEdge); err != nil {
			t.Fatal(err)
		}
	}
	cl := newDeltaClient(t, s.cache, "edge", resourcev3.EndpointType, []string{"api", "web", "db"})
	if g := cl.mustTake("first"); !slices.Equal(g.names, []string{"api", "db", "web"}) {
		t.Fatalf("first = %v", g.names)
	}
	if cl.sub.ReturnedResources()[cache.SetMark] == "" {
		t.Fatal("a delta answer leaves no mark of the set it brought the stream up to date with")
	}
	cl.mustNotTake("ACK with nothing changed")

	update(0, 9100) // api, answered at once: the watch is open
	if g, ok := cl.receive(); !ok || !slices.Equal(g.names, []string{"api"}) {
		t.Fatalf("api change: %v %v", g.names, ok)
	}
	update(1, 9101) // web, while the api response is unacknowledged
	cl.ack()
	if g, ok := cl.receive(); !ok || !slices.Equal(g.names, []string{"web"}) {
		t.Fatalf("one change in flight: got %v %v, want web", g.names, ok)
	}
	update(0, 9102) // two sets while in flight: the names of both count
	update(2, 9103)
	cl.ack()
	if g, ok := cl.receive(); !ok || !slices.Equal(g.names, []string{"api", "db"}) {
		t.Fatalf("two changes in flight: got %v %v, want api and db", g.names, ok)
	}
	cl.ack()
	cl.mustNotTake("ACK after catching up")

	// Subscribing a name that did not change is answered with it.
	cl.sub.UpdateResourceSubscriptions([]string{"cache"}, nil)
	cl.nonce++
	if _, err := s.cache.CreateDeltaWatch(&discoveryv3.DeltaDiscoveryRequest{Node: cl.node, TypeUrl: cl.typ,
		ResponseNonce: cl.nonceStr(), ResourceNamesSubscribe: []string{"cache"}}, cl.sub, cl.dch); err != nil {
		t.Fatal(err)
	}
	if g, ok := cl.receive(); !ok || !slices.Equal(g.names, []string{"cache"}) {
		t.Fatalf("subscribing cache: got %v %v", g.names, ok)
	}
	cl.ack()
	cl.mustNotTake("ACK after subscribing")

	// The ACK trusts the mark: a name dropped from what the stream holds
	// behind the mark's back is not looked at (a full comparison would
	// send it again), which is the point of the mark.
	delete(cl.sub.ReturnedResources(), "api")
	cl.ack()
	cl.mustNotTake("ACK with the mark current")
}

// TestMarkedNamesAreNeverServed: a name that looks like the mark is
// neither sent nor removed, whatever a client subscribes to.
func TestMarkedNamesAreNeverServed(t *testing.T) {
	s := newCacheServer(t, testOutput(t, []string{"api", "web"}, 8080))
	cl := newDeltaClient(t, s.cache, "edge", resourcev3.EndpointType, []string{"api", cache.SetMark, "\x00other"})
	g := cl.mustTake("first")
	if !slices.Equal(g.names, []string{"api"}) || len(g.removed) != 0 {
		t.Fatalf("first = %v removed %v", g.names, g.removed)
	}
	// A new name: every subscribed name is compared again.
	cl.sub.UpdateResourceSubscriptions([]string{"web"}, nil)
	if _, err := s.cache.CreateDeltaWatch(&discoveryv3.DeltaDiscoveryRequest{Node: cl.node, TypeUrl: cl.typ,
		ResponseNonce: cl.nonceStr(), ResourceNamesSubscribe: []string{"web"}}, cl.sub, cl.dch); err != nil {
		t.Fatal(err)
	}
	if g, ok := cl.receive(); !ok || !slices.Equal(g.names, []string{"web"}) || len(g.removed) != 0 {
		t.Fatalf("subscribing web: got %v removed %v (%v)", g.names, g.removed, ok)
	}
}

// TestUpdatesReachStreamsInTheirOrder: an update is handed to a key's
// waiting streams in the order the streams opened, every time, so each
// proxy's pushes are as far apart as the builds.
func TestUpdatesReachStreamsInTheirOrder(t *testing.T) {
	out := testOutput(t, []string{"api"}, 8080)
	s := newCacheServer(t, out)
	const n = 50
	var got []uint64
	subs := make([]*stream.Subscription, n)
	reopen := func(i int, nonce string) {
		req := &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n", Cluster: "edge"}, TypeUrl: resourcev3.EndpointType, ResponseNonce: nonce}
		s.cache.OpenDelta(uint64(n-i), req, subs[i], func(r cachev3.DeltaResponse) {
			subs[i].SetReturnedResources(r.GetNextVersionMap())
			got = append(got, uint64(n-i))
		})
	}
	for i := range n {
		sub := stream.NewDeltaSubscription([]string{"api"}, nil, nil, true)
		subs[i] = &sub
		reopen(i, "")
	}
	for round := range 3 {
		got = got[:0]
		for i := range n {
			reopen(i, "ack") // every stream has its first answer: each waits
		}
		if len(got) != 0 {
			t.Fatalf("round %d: %d answers before the update", round, len(got))
		}
		out = withEndpointPort(out, 0, uint32(9100+round))
		if _, err := s.Update(context.Background(), out, resolveEdge); err != nil {
			t.Fatal(err)
		}
		if len(got) != n || !slices.IsSorted(got) {
			t.Fatalf("round %d: streams answered in the order %v, want 1..%d", round, got, n)
		}
	}
}

// TestClientVersionsNeverCarryAMark: what a reconnecting delta client says
// it holds loses names starting with NUL, without touching its request.
func TestClientVersionsNeverCarryAMark(t *testing.T) {
	sent := map[string]string{"api": "v1", cache.SetMark: "\x00set1"}
	got := cache.ClientVersions(sent)
	if _, ok := got[cache.SetMark]; ok || got["api"] != "v1" || len(got) != 1 {
		t.Fatalf("ClientVersions = %v", got)
	}
	if len(sent) != 2 {
		t.Fatalf("the request's map was edited: %v", sent)
	}
	plain := map[string]string{"api": "v1"}
	if got := cache.ClientVersions(plain); len(got) != 1 {
		t.Fatalf("ClientVersions(%v) = %v", plain, got)
	}
}

// TestSotwSameNamesTakeTheFastPath: a SotW request naming what the
// previous one did is compared only with what changed since the stream's
// last answer; one that names other resources is compared in full.
func TestSotwSameNamesTakeTheFastPath(t *testing.T) {
	s := newCacheServer(t, testOutput(t, []string{"api", "web"}, 8080))
	sub := stream.NewSotwSubscription([]string{"api", "web"}, true)
	var got []cachev3.Response
	open := func(nonce string, same bool) {
		req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n", Cluster: "edge"}, TypeUrl: resourcev3.EndpointType,
			ResponseNonce: nonce, ResourceNames: []string{"api", "web"}}
		s.cache.OpenSotw(1, req, &sub, same, func(r cachev3.Response) {
			sub.SetReturnedResources(r.GetReturnedResources())
			got = append(got, r)
		})
	}
	open("", false)
	if len(got) != 1 {
		t.Fatalf("first request: %d answers", len(got))
	}
	delete(sub.ReturnedResources(), "api") // behind the mark's back
	open("1", true)
	if len(got) != 1 {
		t.Fatal("a request with the same names was compared in full")
	}
	open("1", false)
	if len(got) != 2 {
		t.Fatal("a request with other names was not compared in full")
	}
	if names := slices.Collect(maps.Keys(got[1].GetReturnedResources())); !slices.Contains(names, "api") {
		t.Fatalf("the full comparison did not send api again: %v", names)
	}
}
