package bridge

import (
	"maps"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// TestRouteSourcesFollowTheListenerSets: the route sources a build shows
// are those of its own groups and proxyless resources; the last ones are
// kept only while those are the very same objects.
func TestRouteSourcesFollowTheListenerSets(t *testing.T) {
	edge := &xds.Resources{RouteSources: map[string]string{"edge.http/all/0": "a.hcl:1:1"}}
	grpc := &xds.Resources{RouteSources: map[string]string{"api/api/0": "default"}}
	var r routeSources
	first := r.of(&xds.Output{Groups: map[string]*xds.Resources{"edge": edge}, Proxyless: grpc})
	want := map[string]string{"edge.http/all/0": "a.hcl:1:1", "api/api/0": "default"}
	if !maps.Equal(first, want) {
		t.Fatalf("sources %v, want %v", first, want)
	}
	same := r.of(&xds.Output{Groups: map[string]*xds.Resources{"edge": edge}, Proxyless: grpc})
	if !maps.Equal(same, want) {
		t.Fatalf("sources of the same sets %v, want %v", same, want)
	}
	moved := &xds.Resources{RouteSources: map[string]string{"edge.http/all/0": "a.hcl:9:1"}}
	more := &xds.Resources{RouteSources: map[string]string{"more.http/all/0": "b.hcl:2:1"}}
	tests := map[string]struct {
		out  *xds.Output
		want map[string]string
	}{
		"a group's new set": {&xds.Output{Groups: map[string]*xds.Resources{"edge": moved}, Proxyless: grpc},
			map[string]string{"edge.http/all/0": "a.hcl:9:1", "api/api/0": "default"}},
		"no proxyless": {&xds.Output{Groups: map[string]*xds.Resources{"edge": edge}},
			map[string]string{"edge.http/all/0": "a.hcl:1:1"}},
		"another group": {&xds.Output{Groups: map[string]*xds.Resources{"edge": edge, "more": more}, Proxyless: grpc},
			map[string]string{"edge.http/all/0": "a.hcl:1:1", "more.http/all/0": "b.hcl:2:1", "api/api/0": "default"}},
	}
	for name, tc := range tests {
		r.of(&xds.Output{Groups: map[string]*xds.Resources{"edge": edge}, Proxyless: grpc})
		if got := r.of(tc.out); !maps.Equal(got, tc.want) {
			t.Errorf("%s: sources %v, want %v", name, got, tc.want)
		}
	}
}
