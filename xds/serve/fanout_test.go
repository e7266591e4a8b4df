package serve

import (
	"strconv"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
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

	eventually(t, "the first fan-outs ended", func() bool { return !s.FanningOut() }, func() string { return "" })
	select { // an earlier update's end, not this one's
	case <-s.FanoutIdle():
	default:
	}

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
	// The daemon's build gate (bridge/fanwait.go) hears of the end.
	if s.FanningOut() {
		t.Error("still fanning out after the update's fan-out was observed")
	}
	select {
	case <-s.FanoutIdle():
	case <-time.After(10 * time.Second):
		t.Error("no idle signal after the update's fan-out ended")
	}
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

// TestDroppedAnswersFinishTheFanout: answers a stream never sent because
// it ended do not hold their update's fan-out open.
func TestDroppedAnswersFinishTheFanout(t *testing.T) {
	observed := 0
	answers := updateAnswers(t, 2, func(time.Duration) { observed++ })
	o := newOutbox[cachev3.DeltaResponse]()
	for _, r := range answers {
		o.push(r)
	}
	if observed != 0 {
		t.Fatal("fan-out observed with two answers queued")
	}
	o.drop()
	if observed != 1 {
		t.Errorf("fan-out observed %d times after its stream's queue was dropped, want 1", observed)
	}
}

// updateAnswers is n answers of one update's fan-out, as the cache hands
// them to the delta streams waiting on the shared key; fanned is told the
// fan-out's time once every one of them is handed over.
func updateAnswers(t *testing.T, n int, fanned func(time.Duration)) []cachev3.DeltaResponse {
	t.Helper()
	c := cache.New(cache.Config{Fanned: fanned})
	set := func(port uint32) {
		ts, err := cache.NewSet(resourcev3.EndpointType, []types.Resource{withEndpointPort(testOutput(t, []string{"api"}, 8080), 0, port).Shared.Endpoints[0]}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Set("", map[string]*cache.Set{resourcev3.EndpointType: ts})
	}
	set(9000)
	var answers []cachev3.DeltaResponse
	for i := range n {
		node := &corev3.Node{Id: "n" + strconv.Itoa(i)}
		sub := cache.NewDeltaSubscription(nil, nil, nil)
		// The first answer is the request's; the ACK waits for the update.
		c.OpenDelta(uint64(i), &discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType}, sub,
			func(r cachev3.DeltaResponse) { sub.SetReturnedResources(r.GetNextVersionMap()) })
		c.OpenDelta(uint64(i), &discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResponseNonce: "1"}, sub,
			func(r cachev3.DeltaResponse) { answers = append(answers, r) })
	}
	set(9001)
	if len(answers) != n || !cache.InFanout(answers[0]) {
		t.Fatalf("%d answers of an update, want %d in its fan-out", len(answers), n)
	}
	return answers
}

// TestOpenFanouts: the count of running fan-outs signals idle when its
// last one ends, never blocks the cache's lock when nobody listens, and a
// fan-out still running keeps it busy.
func TestOpenFanouts(t *testing.T) {
	f := newOpenFanouts()
	f.started()
	f.started()
	f.ended()
	select {
	case <-f.idle:
		t.Fatal("idle signalled with one fan-out still running")
	default:
	}
	if f.open.Load() != 1 {
		t.Fatalf("open = %d, want 1", f.open.Load())
	}
	f.ended()
	select {
	case <-f.idle:
	default:
		t.Fatal("no idle signal after the last fan-out ended")
	}
	// Nobody receiving: ended must not block (it runs under the cache's lock).
	for range 3 {
		f.started()
		f.ended()
	}
	if f.open.Load() != 0 {
		t.Errorf("open = %d after every fan-out ended, want 0", f.open.Load())
	}
}
