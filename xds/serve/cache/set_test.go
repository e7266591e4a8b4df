package cache

import (
	"bytes"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
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

// TestArrivedEncodingIsServedAsItCame: a relayed resource is served in the
// bytes it arrived in, not encoded again (an agent decodes what the
// central bridge sends, and encoding each relayed resource anew was a
// large part of its CPU per change). The bytes given here differ from
// the resource's own encoding by an unknown field, so only a set that
// took them serves them. A given encoding of another type is ignored.
func TestArrivedEncodingIsServedAsItCame(t *testing.T) {
	res := endpointSet(t, map[string]uint32{"a": 1}).Entries()[0].Resource()
	own, err := cachev3.MarshalResource(res)
	if err != nil {
		t.Fatal(err)
	}
	arrived := protowire.AppendVarint(protowire.AppendTag(slices.Clone(own), 999, protowire.VarintType), 7)
	for _, tc := range []struct {
		name, typeURL string
		want          []byte
	}{
		{"same type", resourcev3.EndpointType, arrived},
		{"another type", resourcev3.ClusterType, own},
	} {
		enc := map[proto.Message]*anypb.Any{res: {TypeUrl: tc.typeURL, Value: arrived}}
		ts, err := NewSetEncoded(resourcev3.EndpointType, []types.Resource{res}, nil, enc)
		if err != nil {
			t.Fatal(err)
		}
		got := ts.Entries()[0]
		if !bytes.Equal(got.any.GetValue(), tc.want) {
			t.Errorf("%s: served %d bytes, want %d (arrived %d, own %d)", tc.name, len(got.any.GetValue()), len(tc.want), len(arrived), len(own))
		}
		if got.Version() != cachev3.HashResource(tc.want) {
			t.Errorf("%s: version %q is not the hash of the bytes served", tc.name, got.Version())
		}
	}
}

// TestTheSameObjectsBuildNothing: a set asked for again with the very
// objects it holds is returned as it is, without allocating: an agent's
// relay asks for every type's set at every change of any one type.
func TestTheSameObjectsBuildNothing(t *testing.T) {
	ts := endpointSet(t, map[string]uint32{"a": 1, "b": 2, "c": 3})
	var items []types.Resource
	for _, e := range ts.Entries() {
		items = append(items, e.Resource())
	}
	allocs := testing.AllocsPerRun(100, func() {
		if got, err := NewSet(resourcev3.EndpointType, items, ts); err != nil || got != ts {
			t.Fatalf("got a new set (%v) for the same objects", err)
		}
	})
	if allocs > 0 {
		t.Errorf("%.0f allocations for the same objects, want none", allocs)
	}
	// Another order is compared the long way, and still the same set.
	reversed := slices.Clone(items)
	slices.Reverse(reversed)
	if got, err := NewSet(resourcev3.EndpointType, reversed, ts); err != nil || got != ts {
		t.Errorf("reordered: got a new set (%v)", err)
	}
}
