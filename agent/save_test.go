package agent

import (
	"context"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// TestSaveEncodesOnlyWhatChanged: the save after a change encodes the
// objects the change brought and reuses the last save's encoding of the
// others, which the relay keeps as they were. Before, every change of
// every key re-encoded all of its resources (the largest part of an
// agent's CPU per change in the load harness's agent tier). What lands
// on disk is what a full encoding gives, and a dropped key's encodings
// go with it.
func TestSaveEncodesOnlyWhatChanged(t *testing.T) {
	a := New(&Config{DataDir: t.TempDir()}, zerolog.Nop())
	const key = "web"
	a.relays[key] = &relay{}
	kept := &clusterv3.Cluster{Name: "kept"}
	old := &clusterv3.Cluster{Name: "changed", AltStatName: "one"}
	a.persist(key, &xds.Resources{Clusters: []*clusterv3.Cluster{old, kept}})
	a.flush()
	first := a.encoded[key]
	if len(first) != 2 {
		t.Fatalf("first save encoded %d objects, want 2", len(first))
	}
	changed := &clusterv3.Cluster{Name: "changed", AltStatName: "two"}
	a.persist(key, &xds.Resources{Clusters: []*clusterv3.Cluster{changed, kept}})
	a.flush()
	second := a.encoded[key]
	if second[kept] != first[kept] {
		t.Error("the unchanged cluster was encoded again")
	}
	if second[changed] == nil || second[changed] == first[old] {
		t.Error("the changed cluster was not encoded anew")
	}
	if _, held := second[old]; held {
		t.Error("the replaced object's encoding is still held")
	}
	saved, errs := a.store.loadAll()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got := map[string]string{}
	for _, any := range saved[key] {
		var c clusterv3.Cluster
		if err := any.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		got[c.GetName()] = c.GetAltStatName()
	}
	if _, ok := got["kept"]; len(got) != 2 || got["changed"] != "two" || !ok {
		t.Errorf("saved %v, want changed=two and kept", got)
	}
	delete(a.relays, key)
	a.flush()
	if _, held := a.encoded[key]; held {
		t.Error("a dropped key's encodings are still held")
	}
}

// TestSavesAreSpacedAndTheLastIsKept: the first change after a quiet
// spell is written at once; changes that follow within the interval are
// written together, the newest, when it has passed; an agent stopped
// meanwhile writes what is pending before it exits.
func TestSavesAreSpacedAndTheLastIsKept(t *testing.T) {
	a := New(&Config{DataDir: t.TempDir()}, zerolog.Nop())
	const key = "web"
	a.relays[key] = &relay{}
	state := func(v string) *xds.Resources {
		return &xds.Resources{Clusters: []*clusterv3.Cluster{{Name: "c", AltStatName: v}}}
	}
	onDisk := func() string {
		saved, _ := a.store.loadAll()
		for _, any := range saved[key] {
			var c clusterv3.Cluster
			if any.UnmarshalTo(&c) == nil {
				return c.GetAltStatName()
			}
		}
		return ""
	}
	waitFor := func(want string, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for time.Since(start) < within {
			if onDisk() == want {
				return time.Since(start)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("data directory holds %q after %s, want %q", onDisk(), within, want)
		return 0
	}
	const every = 600 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.saveLoopEvery(ctx, every) }()

	a.persist(key, state("one"))
	if took := waitFor("one", every); took > every/2 {
		t.Errorf("the first change after a quiet spell was written after %s; want at once", took)
	}
	a.persist(key, state("two"))
	a.persist(key, state("three"))
	time.Sleep(50 * time.Millisecond)
	if got := onDisk(); got != "one" {
		t.Errorf("50ms after a write, the next change is already on disk (%q): writes are not spaced", got)
	}
	waitFor("three", 3*every)

	a.persist(key, state("four"))
	cancel()
	<-done
	if got := onDisk(); got != "four" {
		t.Errorf("after the agent stopped, the data directory holds %q; want the pending %q", got, "four")
	}
}

// TestSaveKeepsWhatArrived: a resource the central bridge sent is saved in
// the bytes it arrived in (xds.Resources.Encoded), not encoded again; one
// without them (a local secret, a file's) is encoded.
func TestSaveKeepsWhatArrived(t *testing.T) {
	a := New(&Config{DataDir: t.TempDir()}, zerolog.Nop())
	const key = "web"
	a.relays[key] = &relay{}
	relayed := &clusterv3.Cluster{Name: "relayed"}
	own := &clusterv3.Cluster{Name: "own"}
	arrived, err := anypb.New(relayed)
	if err != nil {
		t.Fatal(err)
	}
	a.persist(key, &xds.Resources{Clusters: []*clusterv3.Cluster{relayed, own}, Encoded: map[proto.Message]*anypb.Any{relayed: arrived}})
	a.flush()
	if got := a.encoded[key][relayed]; got != arrived {
		t.Error("the relayed cluster was encoded again")
	}
	if got := a.encoded[key][own]; got == nil || got == arrived {
		t.Error("the cluster that came without its bytes was not encoded")
	}
}
