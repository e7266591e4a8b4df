package agent

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
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

// TestKeepUnanswered: a pending state's types that the newer state has not
// answered are kept; the newer one's own types win; the newer state's map,
// which the client published, is not written.
func TestKeepUnanswered(t *testing.T) {
	pending := adsclient.State{Types: map[string]adsclient.TypeState{
		adsclient.ClusterType:  {Version: "c1"},
		adsclient.EndpointType: {Version: "e1"},
	}}
	newer := adsclient.State{Types: map[string]adsclient.TypeState{
		adsclient.ClusterType: {Version: "c2"},
	}}
	got := keepUnanswered(pending, newer)
	if v := got.Types[adsclient.ClusterType].Version; v != "c2" {
		t.Errorf("CDS %q, want the newer c2", v)
	}
	if v := got.Types[adsclient.EndpointType].Version; v != "e1" {
		t.Errorf("EDS %q, want the pending e1 the newer stream has not answered", v)
	}
	if len(newer.Types) != 1 {
		t.Errorf("the newer state's own map was written: %v", newer.Types)
	}
	if got := keepUnanswered(pending, adsclient.State{}); len(got.Types) != 2 {
		t.Errorf("a newer state with no types: %v", got.Types)
	}
}
