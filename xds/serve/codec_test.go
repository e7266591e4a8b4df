package serve

import (
	"bytes"
	"context"
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

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

func marshalled(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := newSharedCodec().Marshal(m)
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
	out := testOutput(t, []string{"api", "web", "db"}, 8080)
	ts, err := newTypeSet(resourcev3.EndpointType, out.Shared.ByType()[resourcev3.EndpointType], nil)
	if err != nil {
		t.Fatal(err)
	}
	before := sharedSends.Load()

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
	if n := sharedSends.Load() - before; n != 10 {
		t.Fatalf("%d responses sent from the shared encoding, want 10", n)
	}

	// Not what was encoded: the codec must not send the prefix.
	before = sharedSends.Load()
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
	if n := sharedSends.Load() - before; n != 0 {
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

// TestFanOutSharesOneEncodingPerView: over real gRPC, the proxies of one
// group receive a flip from one shared encoding (SotW and delta), hold
// identical state, and the other group's proxies get only their own
// view: sharing never crosses groups.
func TestFanOutSharesOneEncodingPerView(t *testing.T) {
	s := startServer(t, ServerConfig{})
	if _, err := s.Update(context.Background(), twoGroups(t, "a", "c"), resolveAB); err != nil {
		t.Fatal(err)
	}
	var as, bs []*adsclient.Client
	for _, mode := range []adsclient.Mode{adsclient.SotW, adsclient.Delta} {
		for _, id := range []string{"1", "2", "3"} {
			as = append(as, dial(t, s, adsclient.Config{NodeID: "a-" + mode.String() + id, Cluster: "a", Mode: mode}))
			bs = append(bs, dial(t, s, adsclient.Config{NodeID: "b-" + mode.String() + id, Cluster: "b", Mode: mode}))
		}
	}
	synced := func(st adsclient.State) bool {
		return len(st.LoadAssignmentNames()) > 0 && len(st.RouteConfigNames()) > 0
	}
	for _, c := range append(slices.Clone(as), bs...) {
		if _, err := c.Wait(waitCtx(t), synced); err != nil {
			t.Fatal(err)
		}
	}
	before := sharedSends.Load()
	// A flip of a's endpoint: the "a" CLA changes, for group a only.
	m := twoGroupsModel("a", "c")
	m.Clusters[0].Endpoints[0].Health = ir.Unhealthy
	flipped, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(context.Background(), flipped, resolveAB); err != nil {
		t.Fatal(err)
	}
	want := flipped.Shared.ByType()[resourcev3.EndpointType]
	var wantA []byte
	for _, r := range want {
		if xds.ResourceName(r) == "a" {
			wantA = deterministic(t, r)
		}
	}
	for _, c := range as {
		st, err := c.Wait(waitCtx(t), func(st adsclient.State) bool {
			cla := st.Types[adsclient.EndpointType].Resources["a"]
			return cla != nil && bytes.Equal(deterministic(t, cla), wantA)
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := st.ClusterNames(); !slices.Equal(got, []string{"a", "c"}) {
			t.Errorf("group a proxy holds clusters %v", got)
		}
	}
	// 6 proxies of a: one SotW and one delta encoding, each sent 3 times.
	if n := sharedSends.Load() - before; n < 6 {
		t.Errorf("%d flip responses sent from shared encodings, want ≥ 6", n)
	}
	for _, c := range bs {
		st := c.Snapshot()
		if got := st.LoadAssignmentNames(); !slices.Equal(got, []string{"b"}) {
			t.Errorf("group b proxy holds endpoints %v", got)
		}
		if got := st.ClusterNames(); !slices.Equal(got, []string{"b"}) {
			t.Errorf("group b proxy holds clusters %v", got)
		}
	}
}

// TestSharedEncodingsAreBounded: a set remembers at most a few copies of
// its encoding; further distinct views (SotW subscriptions to subsets of
// a large set) are encoded on their own.
func TestSharedEncodingsAreBounded(t *testing.T) {
	out := testOutput(t, []string{"api", "web", "db"}, 8080)
	ts, err := newTypeSet(resourcev3.EndpointType, out.Shared.ByType()[resourcev3.EndpointType], nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.bytes = 1 << 20 // as if the set were 1 MiB: room for 4 copies and a bit
	big := &entry{name: "big", any: &anypb.Any{Value: make([]byte, 1<<20)}}
	shared := 0
	for i := range 10 {
		if ts.sharedFor(shareKey{names: fmt.Sprint(i)}, []*entry{big}, func() any { return &sharedSotw{} }) != nil {
			shared++
		}
	}
	if shared != 4 {
		t.Fatalf("%d of 10 full-size views shared, want 4", shared)
	}
	if ts.sharedFor(shareKey{names: "0"}, []*entry{big}, nil) == nil {
		t.Fatal("a remembered view is no longer shared")
	}
	for i := range 100 {
		ts.sharedFor(shareKey{names: fmt.Sprint("small", i)}, ts.order[:1], func() any { return &sharedSotw{} })
	}
	if len(ts.shared) > maxSharedResponses {
		t.Fatalf("%d responses remembered, want at most %d", len(ts.shared), maxSharedResponses)
	}
}
