package xds

import (
	"context"
	"maps"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestSharedResponsesMatchPerStream: the marshal-once responses carry the
// same version and resources as go-control-plane's own, the marshalled
// resources are shared between streams, and the cache holds only the
// current translation's resources.
func TestSharedResponsesMatchPerStream(t *testing.T) {
	const clusters, streams = 5, 3
	per := newPushFixture(t, true, clusters, streams)
	shared := newPushFixture(t, false, clusters, streams)
	// Both serve the same translations.
	shared.outs = per.outs
	resolve := func(string) string { return "" }
	for k := 1; k <= 3; k++ {
		for _, f := range []*pushFixture{per, shared} {
			if _, err := f.s.Update(context.Background(), f.outs[k%2], resolve); err != nil {
				t.Fatal(err)
			}
		}
		var first []*pushResp
		for i := range streams {
			a, b := per.receive(t, i), shared.receive(t, i)
			if a.GetVersionInfo() != b.GetVersionInfo() || a.GetTypeUrl() != b.GetTypeUrl() {
				t.Fatalf("update %d stream %d: version/type %q %q, want %q %q", k, i, b.GetVersionInfo(), b.GetTypeUrl(), a.GetVersionInfo(), a.GetTypeUrl())
			}
			if got, want := byValue(b), byValue(a); !equalSets(got, want) {
				t.Fatalf("update %d stream %d: resources differ", k, i)
			}
			if i == 0 {
				for _, r := range b.GetResources() {
					first = append(first, &pushResp{r.GetValue()})
				}
				continue
			}
			// Same Any (same bytes backing array) as stream 0's.
			seen := map[*byte]bool{}
			for _, r := range first {
				seen[&r.b[0]] = true
			}
			for _, r := range b.GetResources() {
				if !seen[&r.GetValue()[0]] {
					t.Fatalf("update %d stream %d: resource bytes not shared with stream 0", k, i)
				}
			}
		}
		// Eviction: the cache holds exactly the current resources.
		gen := shared.s.marshal.cur.Load()
		want := 0
		for _, items := range shared.outs[k%2].Shared.ByType() {
			want += len(items)
		}
		for _, items := range shared.outs[k%2].Proxyless.ByType() {
			want += len(items)
		}
		if len(gen.entries) != want {
			t.Fatalf("update %d: marshal cache holds %d entries, want %d", k, len(gen.entries), want)
		}
		for _, e := range shared.outs[(k+1)%2].Shared.Endpoints {
			if _, ok := gen.entries[e]; ok {
				t.Fatalf("update %d: previous translation's resource still cached", k)
			}
		}
	}
}

type pushResp struct{ b []byte }

// byValue is the set of a response's encoded resources (deterministic
// encodings, so equal resources have equal bytes).
func byValue(r *discoveryv3.DiscoveryResponse) map[string]bool {
	m := map[string]bool{}
	for _, a := range r.GetResources() {
		m[a.GetTypeUrl()+"\x00"+string(a.GetValue())] = true
	}
	return m
}

func equalSets(a, b map[string]bool) bool { return maps.Equal(a, b) }

// TestVersionMapMatchesGoControlPlane: the delta version maps the server
// fills in are the ones go-control-plane would compute.
func TestVersionMapMatchesGoControlPlane(t *testing.T) {
	f := newPushFixture(t, false, 5, 1)
	f.s.mu.Lock()
	snap, _, err := f.s.buildLocked("edge")
	f.s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.ConstructVersionMap(); err != nil {
		t.Fatal(err)
	}
	fresh := &cachev3.Snapshot{Resources: snap.Resources}
	if err := fresh.ConstructVersionMap(); err != nil {
		t.Fatal(err)
	}
	for typ, want := range fresh.VersionMap {
		if got := snap.VersionMap[typ]; !maps.Equal(got, want) || got == nil {
			t.Errorf("%s: version map %v, want %v", typ, got, want)
		}
	}
}

// TestMarshalCacheKeepsUnchangedSnapshots: an Update whose content equals
// the last (new resource pointers, same versions) leaves the cached
// snapshots in place, and the marshal cache keeps serving their resources.
func TestMarshalCacheKeepsUnchangedSnapshots(t *testing.T) {
	f := newPushFixture(t, false, 5, 2)
	m := benchModel(0)
	m.Clusters = m.Clusters[:5]
	again, err := Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	changed, err := f.s.Update(context.Background(), again, func(string) string { return "" })
	if err != nil || len(changed) != 0 {
		t.Fatalf("changed %v, err %v", changed, err)
	}
	snap, err := f.s.Cache().GetSnapshot("edge")
	if err != nil {
		t.Fatal(err)
	}
	gen := f.s.marshal.cur.Load()
	for name, r := range snap.GetResources(resourcev3.EndpointType) {
		if _, ok := gen.entries[r]; !ok {
			t.Errorf("served %s not in the marshal cache", name)
		}
	}
	for _, r := range again.Shared.Endpoints {
		if _, ok := gen.entries[r]; !ok {
			t.Errorf("current %s not in the marshal cache", r.GetClusterName())
		}
	}
}
