package cache

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// endpointSet is a set of ClusterLoadAssignments, one endpoint each on
// 127.0.0.1 at the port given by cluster name.
func endpointSet(t *testing.T, ports map[string]uint32) *Set {
	t.Helper()
	var items []types.Resource
	for name, port := range ports {
		items = append(items, &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}}}}},
		}}})
	}
	ts, err := NewSet(resourcev3.EndpointType, items, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestEqualContentInANewObjectIsEncodedOnce: a set built from a new object
// whose content equals the entry's (an agent's relay that redialled
// decodes everything again) keeps the encoding and changes nothing a
// stream sees, and takes the new object, so the builds after it find it
// by identity and encode nothing. Before, the entry kept the old object
// and every later build encoded the resource again: through the agent
// tier at 2,000 proxies, every change re-encoded every relayed resource
// of every agent.
func TestEqualContentInANewObjectIsEncodedOnce(t *testing.T) {
	first := endpointSet(t, map[string]uint32{"a": 1, "b": 2})
	again := endpointSet(t, map[string]uint32{"a": 1, "b": 2}) // new objects, same content
	items := func(ts *Set) []types.Resource {
		var out []types.Resource
		for _, e := range ts.Entries() {
			out = append(out, e.Resource())
		}
		return out
	}
	fresh := items(again)
	refreshed, err := NewSet(resourcev3.EndpointType, fresh, first)
	if err != nil {
		t.Fatal(err)
	}
	if refreshed.Version() != first.Version() || len(refreshed.diff) != 0 {
		t.Fatalf("equal content: version %q (was %q), diff %v; want the same version and no difference", refreshed.Version(), first.Version(), refreshed.diff)
	}
	for i, e := range refreshed.Entries() {
		if e.Resource() != fresh[i] {
			t.Errorf("entry %q holds the old object; the next build would encode it again", e.Name())
		}
		if e.Any() != first.Entries()[i].Any() {
			t.Errorf("entry %q was encoded anew; equal content keeps its encoding", e.Name())
		}
	}
	// The next build with the same objects returns the set itself, as a
	// build whose objects never changed does, and encodes nothing.
	if next, _ := NewSet(resourcev3.EndpointType, fresh, refreshed); next != refreshed {
		t.Error("a build with the objects the set holds made a new set")
	}
	byIdentity := testing.AllocsPerRun(20, func() { _, _ = NewSet(resourcev3.EndpointType, items(first), first) })
	afterRefresh := testing.AllocsPerRun(20, func() { _, _ = NewSet(resourcev3.EndpointType, fresh, refreshed) })
	if afterRefresh > byIdentity {
		t.Errorf("a build after the refresh allocates %.0f times, one whose objects never changed %.0f: it encodes again", afterRefresh, byIdentity)
	}
	// A real change among refreshed objects is still a change.
	changed := endpointSet(t, map[string]uint32{"a": 1, "b": 3})
	next, err := NewSet(resourcev3.EndpointType, items(changed), refreshed)
	if err != nil {
		t.Fatal(err)
	}
	if next.Version() == refreshed.Version() || len(next.diff) != 1 || next.diff[0] != "b" {
		t.Errorf("b's port changed: diff %v, version %q (was %q); want [b] and a new version", next.diff, next.Version(), refreshed.Version())
	}
}
