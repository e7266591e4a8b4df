package cache

import (
	"slices"
	"testing"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestServedToStreams: the load assignments served to keys some stream
// announced, and a Generation that moves when they may have changed
// (first stream, last stream, names) but not for a change of endpoints,
// which is what every health flip is.
func TestServedToStreams(t *testing.T) {
	c := New(Config{})
	eds := func(ports map[string]uint32) map[string]*Set {
		return map[string]*Set{resourcev3.EndpointType: endpointSet(t, ports)}
	}
	served := func() []string { return c.ServedToStreams(resourcev3.EndpointType) }
	c.Set("", eds(map[string]uint32{"all-a": 1, "all-b": 2})) // the shared key, no stream
	if got := served(); len(got) != 0 {
		t.Fatalf("served to streams %v with no stream", got)
	}
	g := c.Generation()
	moved := func(why string, want bool) {
		t.Helper()
		if now := c.Generation(); (now != g) != want {
			t.Fatalf("%s: generation %d -> %d, want moved %v", why, g, now, want)
		}
		g = c.Generation()
	}
	c.Join("edge")
	moved("edge's first stream", true)
	c.Set("edge", eds(map[string]uint32{"api": 1}))
	moved("edge's first sets", true)
	if got := served(); !slices.Equal(got, []string{"api"}) {
		t.Fatalf("served to streams %v, want [api]", got)
	}
	c.Join("edge")
	moved("a second stream of edge", false)
	c.Set("edge", eds(map[string]uint32{"api": 2}))
	moved("api's endpoints changed", false)
	c.Set("edge", eds(map[string]uint32{"web": 2}))
	moved("the names changed", true)
	c.Leave("edge")
	moved("one of two streams left", false)
	c.Leave("edge")
	moved("the last stream left", true)
	if got := served(); len(got) != 0 {
		t.Fatalf("served to streams %v after the last stream left", got)
	}
	c.Join("")
	moved("a stream of the shared key", true)
	if got := served(); !slices.Equal(got, []string{"all-a", "all-b"}) {
		t.Fatalf("served to streams %v, want the shared key's", got)
	}
}
