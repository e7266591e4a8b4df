package cache

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

func marshalled(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := NewCodec().Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b.Materialize()
}

func deterministic(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSharedEncodingIsProtoEncoding: a response sent from its shared
// encoding is byte for byte what proto.Marshal makes of it, SotW and
// delta; a message whose version or type differs from what was encoded,
// or that does not carry the shared slice, is encoded on its own.
func TestSharedEncodingIsProtoEncoding(t *testing.T) {
	ts := endpointSet(t, map[string]uint32{"api": 9000, "web": 9001, "db": 9002})
	before := SharedSends()

	sh := newSharedSotw(ts.version, ts.typeURL, ts.order)
	// The nonce alone is encoded by hand: empty, short, and long enough
	// for a two-byte length.
	long := strings.Repeat("9", 200)
	for _, nonce := range []string{"", "1", "12345", long} {
		m := sh.response(ts.version, ts.typeURL)
		m.Nonce = nonce
		if got, want := marshalled(t, m), deterministic(t, m); !bytes.Equal(got, want) {
			t.Fatalf("SotW nonce %q: shared encoding differs from proto.Marshal:\n got %x\nwant %x", nonce, got, want)
		}
	}
	m := sh.response(ts.version, ts.typeURL)
	m.Nonce, m.ControlPlane = "3", &corev3.ControlPlane{Identifier: "bridge"}
	if got, want := marshalled(t, m), deterministic(t, m); !bytes.Equal(got, want) {
		t.Fatalf("SotW with a control plane: shared encoding differs:\n got %x\nwant %x", got, want)
	}
	dsh := newSharedDelta(ts.version, ts.typeURL, ts.order[:1])
	for _, removed := range [][]string{nil, {"gone", "old"}} {
		for _, nonce := range []string{"7", long} {
			m := dsh.response(ts.version, ts.typeURL, removed)
			m.Nonce = nonce
			if got, want := marshalled(t, m), deterministic(t, m); !bytes.Equal(got, want) {
				t.Fatalf("delta removing %v, nonce %q: shared encoding differs:\n got %x\nwant %x", removed, nonce, got, want)
			}
		}
	}
	d := dsh.response(ts.version, ts.typeURL, nil)
	d.Nonce, d.ControlPlane = "8", &corev3.ControlPlane{Identifier: "bridge"}
	if got, want := marshalled(t, d), deterministic(t, d); !bytes.Equal(got, want) {
		t.Fatalf("delta with a control plane: shared encoding differs:\n got %x\nwant %x", got, want)
	}
	if n := SharedSends() - before; n != 10 {
		t.Fatalf("%d responses sent from the shared encoding, want 10", n)
	}

	// Not what was encoded: the codec must not send the prefix.
	before = SharedSends()
	m = sh.response(ts.version, ts.typeURL)
	m.VersionInfo = "other"
	if got, want := marshalled(t, m), deterministic(t, m); !bytes.Equal(got, want) {
		t.Fatal("a changed version was sent with the shared prefix")
	}
	m = sh.response(ts.version, ts.typeURL)
	m.Resources = slices.Clone(m.Resources) // same resources, own slice
	m.Nonce = "1"
	if got, want := marshalled(t, m), deterministic(t, m); !bytes.Equal(got, want) {
		t.Fatal("own slice encoded wrongly")
	}
	d = dsh.response(ts.version, ts.typeURL, nil)
	d.TypeUrl = resourcev3.ClusterType
	if got, want := marshalled(t, d), deterministic(t, d); !bytes.Equal(got, want) {
		t.Fatal("a changed type URL was sent with the shared prefix")
	}
	if n := SharedSends() - before; n != 0 {
		t.Fatalf("%d mismatching responses sent from a shared encoding", n)
	}
}

// TestNonceField: the nonce the codec encodes by hand is field 5 of both
// responses.
func TestNonceField(t *testing.T) {
	for _, m := range []proto.Message{&discoveryv3.DiscoveryResponse{}, &discoveryv3.DeltaDiscoveryResponse{}} {
		f := m.ProtoReflect().Descriptor().Fields().ByName("nonce")
		if f == nil || f.Number() != nonceField || f.Kind() != protoreflect.StringKind {
			t.Errorf("%T: nonce is %v, want string field %d", m, f, nonceField)
		}
	}
}

// TestSharedEncodingsAreBounded: a set remembers at most a few copies of
// its encoding; further distinct views (SotW subscriptions to subsets of
// a large set) are encoded on their own.
func TestSharedEncodingsAreBounded(t *testing.T) {
	ts := endpointSet(t, map[string]uint32{"api": 9000, "web": 9001, "db": 9002})
	ts.bytes = 1 << 20 // as if the set were 1 MiB: room for 4 copies and a bit
	big := &Entry{name: "big", any: &anypb.Any{Value: make([]byte, 1<<20)}}
	shared := 0
	for i := range 10 {
		if ts.sharedFor(shareKey{names: fmt.Sprint(i)}, []*Entry{big}, func() any { return &sharedSotw{} }) != nil {
			shared++
		}
	}
	if shared != 4 {
		t.Fatalf("%d of 10 full-size views shared, want 4", shared)
	}
	if ts.sharedFor(shareKey{names: "0"}, []*Entry{big}, nil) == nil {
		t.Fatal("a remembered view is no longer shared")
	}
	for i := range 100 {
		ts.sharedFor(shareKey{names: fmt.Sprint("small", i)}, ts.order[:1], func() any { return &sharedSotw{} })
	}
	if len(ts.shared) > maxSharedResponses {
		t.Fatalf("%d responses remembered, want at most %d", len(ts.shared), maxSharedResponses)
	}
}

// TestSharedPushIsOneAllocation: a push sent from its shared encoding
// costs the stream one allocation (its buffers and nonce together), SotW
// and delta: it is made for every proxy a change reaches.
func TestSharedPushIsOneAllocation(t *testing.T) {
	ts := endpointSet(t, map[string]uint32{"api": 9000, "web": 9001})
	m := newSharedSotw(ts.version, ts.typeURL, ts.order).response(ts.version, ts.typeURL)
	m.Nonce = "123456789"
	d := newSharedDelta(ts.version, ts.typeURL, ts.order).response(ts.version, ts.typeURL, nil)
	d.Nonce = "987654321"
	c := NewCodec()
	for _, msg := range []proto.Message{m, d} {
		if _, err := c.Marshal(msg); err != nil { // encodes the shared prefix once
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = c.Marshal(msg) }); n != 1 {
			t.Errorf("%T from its shared encoding took %v allocations, want 1", msg, n)
		}
	}
}
