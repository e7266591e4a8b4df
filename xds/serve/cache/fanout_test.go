package cache

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
)

// TestFanoutWaitsForTheLastAnswer: the cache's answers to one update are
// one fan-out, finished only when the last is handed over (a stream that
// has not sent yet holds it open), observed exactly once, and an early
// hand-over while the cache still answers does not finish it.
func TestFanoutWaitsForTheLastAnswer(t *testing.T) {
	var observed []time.Duration
	c := New(Config{Fanned: func(d time.Duration) { observed = append(observed, d) }})
	c.Set("", endpointSets(t, 9000))
	// Three streams wait on endpoints; the first one hands its answer
	// over at once, from within the cache's answering.
	var held []cachev3.DeltaResponse
	for i := range 3 {
		cl := newWatcher(t, c)
		if !cl.receive() {
			t.Fatal("no initial answer")
		}
		first := i == 0
		req := &discoveryv3.DeltaDiscoveryRequest{Node: cl.node, TypeUrl: cl.typ, ResponseNonce: "1"}
		c.openDeltaWatch(0, req, cl.sub, false, func(r cachev3.DeltaResponse) {
			if first {
				HandedOver(r)
				return
			}
			held = append(held, r)
		})
	}
	// A fourth stream got its initial answer but has not acknowledged it
	// when the update is served: it has no watch filed.
	late := newWatcher(t, c)
	again := newWatcher(t, c)
	for _, cl := range []*watcher{late, again} {
		if !cl.receive() {
			t.Fatal("no initial answer")
		}
	}
	if len(observed) != 0 {
		t.Fatalf("answers to requests observed as fan-outs (%v)", observed)
	}
	c.Set("", endpointSets(t, 9999))
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
	fresh := newWatcher(t, c)
	if r, ok := <-fresh.dch; !ok || r.(*DeltaResponse).fan != nil {
		t.Fatal("a new stream's first answer was counted in the update's fan-out")
	}
	if len(observed) != 0 {
		t.Fatalf("fan-out observed with three answers not handed over (%v)", observed)
	}
	HandedOver(held[0])
	HandedOver(held[1])
	if len(observed) != 0 {
		t.Fatalf("fan-out observed with the late stream's answer not handed over (%v)", observed)
	}
	HandedOver(caughtUp)
	if len(observed) != 1 || observed[0] <= 0 {
		t.Fatalf("fan-outs observed %v, want one positive duration", observed)
	}
	// Once observed, a fan-out is never reopened: another stream that
	// held the first set acknowledges only now.
	var after cachev3.DeltaResponse
	c.openDeltaWatch(0, &discoveryv3.DeltaDiscoveryRequest{Node: again.node, TypeUrl: again.typ, ResponseNonce: "1"}, again.sub, false,
		func(r cachev3.DeltaResponse) { after = r })
	if after == nil || after.(*DeltaResponse).fan != nil {
		t.Fatalf("an answer after the fan-out was observed joined it (%v)", after)
	}
}

// endpointSets is the endpoints of api (on apiPort) and web as the
// cache serves them.
func endpointSets(t *testing.T, apiPort uint32) map[string]*Set {
	return map[string]*Set{resourcev3.EndpointType: endpointSet(t, map[string]uint32{"api": apiPort, "web": 9001})}
}

// watcher is a delta stream of the shared key following every endpoint,
// driven as go-control-plane's delta server drives a cache.
type watcher struct {
	node *corev3.Node
	typ  string
	sub  stream.Subscription
	dch  chan cachev3.DeltaResponse
}

func newWatcher(t *testing.T, c *Cache) *watcher {
	t.Helper()
	w := &watcher{node: &corev3.Node{Id: "n"}, typ: resourcev3.EndpointType,
		sub: stream.NewDeltaSubscription(nil, nil, nil, true), dch: make(chan cachev3.DeltaResponse, 1)}
	if _, err := c.CreateDeltaWatch(&discoveryv3.DeltaDiscoveryRequest{Node: w.node, TypeUrl: w.typ}, w.sub, w.dch); err != nil {
		t.Fatal(err)
	}
	return w
}

// receive takes the pending answer (false if none) into what the stream
// holds, as a server does once it sent it, without acknowledging it.
func (w *watcher) receive() bool {
	select {
	case r := <-w.dch:
		w.sub.SetReturnedResources(r.GetReturnedResources())
		return true
	default:
		return false
	}
}

// TestCatchUpJoinsOnlyTheLatestUpdate: once an update answered nobody, a
// proxy catching up does not join an older update's open fan-out.
func TestCatchUpJoinsOnlyTheLatestUpdate(t *testing.T) {
	c := New(Config{Fanned: func(time.Duration) {}})
	port := uint32(9000)
	next := func() map[string]*Set {
		port++
		return endpointSets(t, port)
	}
	c.Set("", next())
	waiting := newWatcher(t, c)
	behind := newWatcher(t, c)
	for _, cl := range []*watcher{waiting, behind} {
		if !cl.receive() {
			t.Fatal("no initial answer")
		}
	}
	var held cachev3.DeltaResponse
	c.openDeltaWatch(0, &discoveryv3.DeltaDiscoveryRequest{Node: waiting.node, TypeUrl: waiting.typ, ResponseNonce: "1"}, waiting.sub, false,
		func(r cachev3.DeltaResponse) { held = r })
	c.Set("", next()) // answers waiting; its fan-out stays open (held)
	if held == nil || held.(*DeltaResponse).fan == nil {
		t.Fatal("the update's answer carries no fan-out")
	}
	c.Set("", next()) // answers nobody: no watch is filed
	var caughtUp cachev3.DeltaResponse
	c.openDeltaWatch(0, &discoveryv3.DeltaDiscoveryRequest{Node: behind.node, TypeUrl: behind.typ, ResponseNonce: "1"}, behind.sub, false,
		func(r cachev3.DeltaResponse) { caughtUp = r })
	if caughtUp == nil {
		t.Fatal("the stream behind was not answered at once")
	}
	if caughtUp.(*DeltaResponse).fan != nil {
		t.Error("a stream catching up with the latest update joined an older update's fan-out")
	}
}

// openDeltaWatch files a watch of its own for req; own says whether its
// answers may edit the versions the stream holds (the bridge's server).
func (c *Cache) openDeltaWatch(order uint64, req *cachev3.DeltaRequest, sub cachev3.Subscription, own bool, send func(cachev3.DeltaResponse)) func() {
	w := &DeltaWatch{watchBase: watchBase{c: c, order: order, sub: sub, own: own}, to: DeltaFunc(send)}
	w.File(req)
	return w.Cancel
}
