package agent

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// TestHandoff: offer returns while fn still runs (the stream's reader is
// not held), values offered meanwhile collapse through merge into one
// run, runs never overlap and keep their order, and a later offer runs
// again once the handoff went idle.
func TestHandoff(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{})
	var (
		mu      sync.Mutex
		ran     []string
		merges  []string
		running int
		overlap bool
	)
	done := make(chan struct{}, 10)
	h := handoff[string]{
		fn: func(v string) {
			mu.Lock()
			running++
			overlap = overlap || running > 1
			mu.Unlock()
			if v == "1" {
				close(started)
				<-release
			}
			mu.Lock()
			running--
			ran = append(ran, v)
			mu.Unlock()
			done <- struct{}{}
		},
		merge: func(pending, newer string) string {
			merges = append(merges, pending+"<"+newer)
			return pending + "+" + newer
		},
	}
	returned := make(chan struct{})
	go func() {
		h.offer("1")
		<-started
		h.offer("2")
		h.offer("3")
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("offer waited for fn: the stream's reader would be held by the local fan-out")
	}
	close(release)
	for range 2 {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("fn ran %v, want 2 runs", ran)
		}
	}
	h.offer("4")
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("an offer after the handoff went idle never ran")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"1", "2+3", "4"}; !slices.Equal(ran, want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
	if want := []string{"2<3"}; !slices.Equal(merges, want) {
		t.Errorf("merged %v, want %v", merges, want)
	}
	if overlap {
		t.Error("two runs of fn overlapped")
	}
}

// TestHandoffFlush: flush returns only once what was offered has been
// handled, and at once when nothing is.
func TestHandoffFlush(t *testing.T) {
	release := make(chan struct{})
	var handled atomic.Int32
	h := handoff[int]{fn: func(int) { <-release; handled.Add(1) }, merge: func(_, n int) int { return n }}
	h.flush() // idle: at once
	h.offer(1)
	flushed := make(chan struct{})
	go func() { h.flush(); close(flushed) }()
	select {
	case <-flushed:
		t.Fatal("flush returned while an offered value was still being handled")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case <-flushed:
	case <-time.After(5 * time.Second):
		t.Fatal("flush never returned")
	}
	if n := handled.Load(); n != 1 {
		t.Errorf("handled %d values at flush, want 1", n)
	}
}

// TestNoLateUpdateAfterRefusal: an update the stream delivered just before
// the central bridge refused the key is applied before the refusal, never
// after it. Applied after, it would clear the refusal and serve the key
// again: a group the central no longer authorizes for this agent.
func TestNoLateUpdateAfterRefusal(t *testing.T) {
	a := New(&Config{DataDir: t.TempDir()}, zerolog.Nop())
	r := newRelay(a, serve.ParseRelayKey("web"))
	slow := make(chan struct{})
	r.updates.fn = func(st adsclient.State) { <-slow; r.apply(st) }
	r.updates.offer(adsclient.State{Types: map[string]adsclient.TypeState{
		adsclient.ClusterType: {Version: "1", Resources: map[string]proto.Message{"api": &clusterv3.Cluster{Name: "api"}}},
	}})
	ended := make(chan struct{})
	go func() {
		// What stream does once its client has ended with PermissionDenied.
		r.settle()
		r.refuse("the central bridge refuses group web to this agent")
		close(ended)
	}()
	time.Sleep(50 * time.Millisecond) // the refusal, unsettled, would run now
	close(slow)
	<-ended
	r.updates.flush() // a late update, if any, has been applied too
	r.mu.Lock()
	refused := r.refused
	r.mu.Unlock()
	if refused == "" {
		t.Fatal("the late update cleared the refusal: the key is served again")
	}
	if slices.Contains(a.server.RelayKeys(), r.key.Key) {
		t.Errorf("the refused key %q is still served (relayed keys %v)", r.key.Key, a.server.RelayKeys())
	}
}

// TestRelayReaderNotHeldByApply: the stream's OnUpdate returns while the
// relay cannot apply (its lock held here, as by a long apply), so the
// client queues the ACK at once; the update is applied afterwards.
func TestRelayReaderNotHeldByApply(t *testing.T) {
	a := New(&Config{DataDir: t.TempDir()}, zerolog.Nop())
	r := newRelay(a, serve.ParseRelayKey("web"))
	r.mu.Lock()
	returned := make(chan struct{})
	go func() {
		r.onUpdate(adsclient.Update{State: adsclient.State{Types: map[string]adsclient.TypeState{
			adsclient.ClusterType: {Version: "1", Resources: map[string]proto.Message{"api": &clusterv3.Cluster{Name: "api"}}},
		}}})
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		r.mu.Unlock()
		t.Fatal("OnUpdate waited for the apply: the ACK would wait behind the local fan-out")
	}
	r.mu.Unlock()
	r.settle()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.held[adsclient.ClusterType]["api"]; !ok {
		t.Errorf("the update was never applied: held %v", r.held)
	}
}
