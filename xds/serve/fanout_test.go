package serve

import (
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// fanouts is how many updates push_fanout_seconds has observed.
func fanouts(t *testing.T, s *Server) uint64 {
	t.Helper()
	var m dto.Metric
	if err := s.metrics.fanout.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestPushFanoutMetric: an update that reaches a key's proxies is
// observed once, when the last of them (SotW and delta alike) was sent
// it, not once per proxy; an update no proxy waits on, none.
func TestPushFanoutMetric(t *testing.T) {
	s := startServer(t, ServerConfig{Registerer: prometheus.NewRegistry()})
	s.update(t, testOutput(t, []string{"api", "web"}, 8080))
	clients := []*adsclient.Client{
		dial(t, s, adsclient.Config{NodeID: "sotw-1", NoListeners: true}),
		dial(t, s, adsclient.Config{NodeID: "delta-1", NoListeners: true, Mode: adsclient.Delta}),
		dial(t, s, adsclient.Config{NodeID: "delta-2", NoListeners: true, Mode: adsclient.Delta}),
	}
	for _, c := range clients {
		if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.LoadAssignmentNames()) == 2 }); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"sotw-1", "delta-1", "delta-2"} {
		s.waitStatus(t, id, "EDS", StatusSynced)
	}
	before := fanouts(t, s.Server)

	moved := withEndpointPort(testOutput(t, []string{"api", "web"}, 8080), 0, 9999)
	s.update(t, moved)
	want := s.current("", resourcev3.EndpointType)
	for _, c := range clients {
		if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return st.Version(resourcev3.EndpointType) == want }); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the update's fan-out observed", func() bool { return fanouts(t, s.Server) == before+1 },
		func() string { return "" })
	for _, id := range []string{"sotw-1", "delta-1", "delta-2"} {
		s.waitStatus(t, id, "EDS", StatusSynced)
	}
	time.Sleep(50 * time.Millisecond) // nothing else may arrive
	if n := fanouts(t, s.Server); n != before+1 {
		t.Errorf("%d fan-outs observed for one update of three proxies, want 1", n-before)
	}
	// The same resources again: nobody is answered, nothing observed.
	s.update(t, withEndpointPort(testOutput(t, []string{"api", "web"}, 8080), 0, 9999))
	time.Sleep(50 * time.Millisecond)
	if n := fanouts(t, s.Server); n != before+1 {
		t.Errorf("an update that answered nobody was observed (%d fan-outs)", n-before)
	}
}

// TestFanoutWaitsForTheLastAnswer: the cache's answers to one update are
// one fan-out, finished only when the last is handed over (a stream that
// has not sent yet holds it open), observed exactly once, and an early
// hand-over while the cache still answers does not finish it.
func TestFanoutWaitsForTheLastAnswer(t *testing.T) {
	c := newServeCache()
	var observed []time.Duration
	c.fanned = func(d time.Duration) { observed = append(observed, d) }
	c.set("", sharedSets(t, testOutput(t, []string{"api", "web"}, 8080)))
	// Three streams wait on endpoints; the first one hands its answer
	// over at once, from within the cache's answering.
	var held []cachev3.DeltaResponse
	for i := range 3 {
		cl := newDeltaClient(t, c, "", resourcev3.EndpointType, nil)
		if _, ok := cl.receive(); !ok {
			t.Fatal("no initial answer")
		}
		first := i == 0
		req := &discoveryv3.DeltaDiscoveryRequest{Node: cl.node, TypeUrl: cl.typ, ResponseNonce: "1"}
		c.openDeltaWatch(0, req, cl.sub, false, func(r cachev3.DeltaResponse) {
			if first {
				handedOver(r)
				return
			}
			held = append(held, r)
		})
	}
	// A fourth stream got its initial answer but has not acknowledged it
	// when the update is served: it has no watch filed.
	late := newDeltaClient(t, c, "", resourcev3.EndpointType, nil)
	again := newDeltaClient(t, c, "", resourcev3.EndpointType, nil)
	for _, cl := range []*cacheClient{late, again} {
		if _, ok := cl.receive(); !ok {
			t.Fatal("no initial answer")
		}
	}
	if len(observed) != 0 {
		t.Fatalf("answers to requests observed as fan-outs (%v)", observed)
	}
	c.set("", sharedSets(t, withEndpointPort(testOutput(t, []string{"api", "web"}, 8080), 0, 9999)))
	if len(held) != 2 {
		t.Fatalf("%d answers held, want 2", len(held))
	}
	// Its acknowledgement comes now and is answered at once, with the
	// update: part of its fan-out. A new stream's first answer is not.
	var caughtUp cachev3.DeltaResponse
	c.openDeltaWatch(0, &discoveryv3.DeltaDiscoveryRequest{Node: late.node, TypeUrl: late.typ, ResponseNonce: "1"}, late.sub, false,
		func(r cachev3.DeltaResponse) { caughtUp = r })
	if caughtUp == nil {
		t.Fatal("the late stream's acknowledgement was not answered at once")
	}
	fresh := newDeltaClient(t, c, "", resourcev3.EndpointType, nil)
	if r, ok := <-fresh.dch; !ok || r.(*deltaResponse).fan != nil {
		t.Fatal("a new stream's first answer was counted in the update's fan-out")
	}
	if len(observed) != 0 {
		t.Fatalf("fan-out observed with three answers not handed over (%v)", observed)
	}
	handedOver(held[0])
	handedOver(held[1])
	if len(observed) != 0 {
		t.Fatalf("fan-out observed with the late stream's answer not handed over (%v)", observed)
	}
	handedOver(caughtUp)
	if len(observed) != 1 || observed[0] <= 0 {
		t.Fatalf("fan-outs observed %v, want one positive duration", observed)
	}
	// Once observed, a fan-out is never reopened: another stream that
	// held the first set acknowledges only now.
	var after cachev3.DeltaResponse
	c.openDeltaWatch(0, &discoveryv3.DeltaDiscoveryRequest{Node: again.node, TypeUrl: again.typ, ResponseNonce: "1"}, again.sub, false,
		func(r cachev3.DeltaResponse) { after = r })
	if after == nil || after.(*deltaResponse).fan != nil {
		t.Fatalf("an answer after the fan-out was observed joined it (%v)", after)
	}
}

// sharedSets is out's shared resources as the cache serves them.
func sharedSets(t *testing.T, out *xds.Output) map[string]*typeSet {
	t.Helper()
	sets := map[string]*typeSet{}
	for typ, items := range out.Shared.ByType() {
		ts, err := newTypeSet(typ, items, nil)
		if err != nil {
			t.Fatal(err)
		}
		sets[typ] = ts
	}
	return sets
}

// TestDroppedAnswersFinishTheFanout: answers a stream never sent because
// it ended do not hold their update's fan-out open.
func TestDroppedAnswersFinishTheFanout(t *testing.T) {
	observed := 0
	f := newFanout(func(time.Duration) { observed++ })
	o := newOutbox[cachev3.DeltaResponse]()
	for range 2 {
		r := &deltaResponse{}
		if !f.attach(r, false) {
			t.Fatal("an answer of the cache's was not attached")
		}
		o.push(r)
	}
	f.handed() // the cache is done answering
	if observed != 0 {
		t.Fatal("fan-out observed with two answers queued")
	}
	o.drop()
	if observed != 1 {
		t.Errorf("fan-out observed %d times after its stream's queue was dropped, want 1", observed)
	}
}

// TestCatchUpJoinsOnlyTheLatestUpdate: once an update answered nobody, a
// proxy catching up does not join an older update's open fan-out.
func TestCatchUpJoinsOnlyTheLatestUpdate(t *testing.T) {
	c := newServeCache()
	c.fanned = func(time.Duration) {}
	port := uint32(9000)
	next := func() map[string]*typeSet {
		port++
		return sharedSets(t, withEndpointPort(testOutput(t, []string{"api", "web"}, 8080), 0, port))
	}
	c.set("", next())
	waiting := newDeltaClient(t, c, "", resourcev3.EndpointType, nil)
	behind := newDeltaClient(t, c, "", resourcev3.EndpointType, nil)
	for _, cl := range []*cacheClient{waiting, behind} {
		if _, ok := cl.receive(); !ok {
			t.Fatal("no initial answer")
		}
	}
	var held cachev3.DeltaResponse
	c.openDeltaWatch(0, &discoveryv3.DeltaDiscoveryRequest{Node: waiting.node, TypeUrl: waiting.typ, ResponseNonce: "1"}, waiting.sub, false,
		func(r cachev3.DeltaResponse) { held = r })
	c.set("", next()) // answers waiting; its fan-out stays open (held)
	if held == nil || held.(*deltaResponse).fan == nil {
		t.Fatal("the update's answer carries no fan-out")
	}
	c.set("", next()) // answers nobody: no watch is filed
	var caughtUp cachev3.DeltaResponse
	c.openDeltaWatch(0, &discoveryv3.DeltaDiscoveryRequest{Node: behind.node, TypeUrl: behind.typ, ResponseNonce: "1"}, behind.sub, false,
		func(r cachev3.DeltaResponse) { caughtUp = r })
	if caughtUp == nil {
		t.Fatal("the stream behind was not answered at once")
	}
	if caughtUp.(*deltaResponse).fan != nil {
		t.Error("a stream catching up with the latest update joined an older update's fan-out")
	}
}
