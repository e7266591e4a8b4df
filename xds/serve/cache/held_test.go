package cache

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// TestHeldContentCollision: a map found by its content's hash is used
// only if it holds the same versions; on a collision the stream keeps
// its own.
func TestHeldContentCollision(t *testing.T) {
	ts := &Set{mark: "m1"}
	other := map[string]string{"api": "v2", SetMark: "m1", SharedMark: "x"}
	mine := map[string]string{"api": "v1", SetMark: "m1"}
	ts.heldByContent = map[uint64]map[string]string{heldSum(mine): other}
	got := ts.keep(mine)
	if got["api"] != "v1" || IsShared(got) {
		t.Fatalf("keep on a collision = %v, want the stream's own map", got)
	}
	same := map[string]string{"api": "v2", SetMark: "m1"}
	ts.heldByContent = map[uint64]map[string]string{heldSum(same): other}
	if got := ts.keep(same); !sameMap(got, other) {
		t.Fatalf("keep with equal content = %v, want the shared map", got)
	}
}

// TestNamesKeyIsUnique: different lists of sent and removed names have
// different keys, and a list's key is never a single name's.
func TestNamesKeyIsUnique(t *testing.T) {
	es := func(names ...string) []*Entry {
		var out []*Entry
		for _, n := range names {
			out = append(out, &Entry{name: n})
		}
		return out
	}
	keys := map[string]string{}
	for _, c := range []struct {
		sent, removed []string
	}{
		{nil, nil}, {[]string{"a"}, nil}, {[]string{"a", "b"}, nil}, {nil, []string{"a"}}, {nil, []string{"a", "b"}},
		{nil, []string{"a\x00\x01b"}}, {[]string{"a"}, []string{"b"}}, {[]string{"a", "b"}, []string{"c"}},
		{[]string{"ab"}, nil}, {[]string{"a", "b"}, []string{""}}, {nil, []string{"\x01a"}}, {nil, []string{"a\x01b"}},
	} {
		k := namesKey(es(c.sent...), c.removed)
		what := fmt.Sprintf("%q/%q", c.sent, c.removed)
		if prev, dup := keys[k]; dup {
			t.Fatalf("%s and %s share the key %q", prev, what, k)
		}
		keys[k] = what
		if len(c.sent)+len(c.removed) > 1 && strings.IndexByte(k, 0) < 0 && len(c.sent) > 0 {
			t.Fatalf("%s: a list's key %q holds no NUL: it could be a name", what, k)
		}
	}
}

// TestHeldPastTheBoundIsOwn: with no room left in the set, an answer to
// a stream holding a shared map leaves it a map of its own, not one that
// passes for its predecessor.
func TestHeldPastTheBoundIsOwn(t *testing.T) {
	ts := &Set{mark: "m2", held: map[heldKey]map[string]string{}, heldByContent: map[uint64]map[string]string{}}
	for i := range MaxHeldMaps {
		ts.held[heldKey{prev: "x", names: strconv.Itoa(i)}] = nil
		ts.heldByContent[uint64(i)] = nil
	}
	prev := map[string]string{"api": "v1", SetMark: "m1", SharedMark: "p1"}
	got := ts.heldAfter(prev, []*Entry{{name: "api", version: "v2"}}, nil, "api", true)
	if IsShared(got) || got["api"] != "v2" || got[SetMark] != "m2" {
		t.Fatalf("past the bound: %v, want a map of its own at v2 and the set's mark", got)
	}
	if prev["api"] != "v1" {
		t.Fatal("the shared predecessor was written")
	}
}

// TestHeldMemoIsBounded: past MaxHeldMaps distinct maps a set memoises no
// more (xds/serve's TestHeldMapsAreBounded: the streams' side).
func TestHeldMemoIsBounded(t *testing.T) {
	ports := map[string]uint32{}
	for i := range MaxHeldMaps + 20 {
		ports["c"+strconv.Itoa(i)] = uint32(9000 + i)
	}
	c := New(Config{})
	c.Set("", map[string]*Set{resourcev3.EndpointType: endpointSet(t, ports)})
	for name := range ports {
		sub := NewDeltaSubscription([]string{name}, nil, nil)
		req := &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: name}, TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{name}}
		answered := false
		c.OpenDelta(0, req, sub, func(r cachev3.DeltaResponse) { sub.SetReturnedResources(r.GetNextVersionMap()); answered = true })
		if !answered {
			t.Fatalf("%s: no first answer", name)
		}
	}
	ts := c.Served("")[resourcev3.EndpointType]
	c.mu.Lock()
	n, k := len(ts.heldByContent), len(ts.held)
	c.mu.Unlock()
	if n > MaxHeldMaps || k > MaxHeldMaps || n < MaxHeldMaps {
		t.Fatalf("%d maps by content, %d by key: want the bound %d", n, k, MaxHeldMaps)
	}
}
