package cache

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/envoynode"
)

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantDecoded is proto.Unmarshal's result less what trimNode drops.
func wantDecoded(t testing.TB, b []byte, into proto.Message) proto.Message {
	t.Helper()
	want := into.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(b, want); err != nil {
		t.Fatal(err)
	}
	if n := RequestNode(want); n != nil {
		trimNode(n)
	}
	return want
}

// TestNodeMemoDecodesAsProto: a stream's requests decode through the memo
// to what proto.Unmarshal gives (less extensions); a node with the bytes
// of the one before is that node, not a new decoding; a node that
// differs, or none, or one split over two fields, decodes as sent.
func TestNodeMemoDecodesAsProto(t *testing.T) {
	envoy := envoynode.New("web-1", "web")
	other := envoynode.New("web-2", "web")
	// Same head, other tail at the same length; same head and tail,
	// other length (an extension more in the middle).
	tail := envoynode.New("web-2", "web")
	tail.ClientFeatures[len(tail.ClientFeatures)-1] = "xds.config.resource-in-sotX"
	longer := envoynode.New("web-2", "web")
	longer.Extensions = append(longer.Extensions[:100:100], append([]*corev3.Extension{{Name: "envoy.filters.http.extra", Category: "envoy.filters.http"}}, longer.Extensions[100:]...)...)
	second := &corev3.Node{Cluster: "api"}
	for _, delta := range []bool{true, false} {
		req := func(node *corev3.Node, typeURL, nonce string) proto.Message {
			if delta {
				return &discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: typeURL, ResponseNonce: nonce, ResourceNamesSubscribe: []string{"a", "b"}}
			}
			return &discoveryv3.DiscoveryRequest{VersionInfo: "v" + nonce, Node: node, TypeUrl: typeURL, ResponseNonce: nonce, ResourceNames: []string{"a"}}
		}
		steps := []struct {
			name  string
			bytes []byte
			reuse bool // the node is the previous step's
		}{
			{"first", mustMarshal(t, req(envoy, resourcev3.ClusterType, "")), false},
			{"same node, ACK", mustMarshal(t, req(envoy, resourcev3.ClusterType, "1")), true},
			{"same node, other type", mustMarshal(t, req(envoy, resourcev3.EndpointType, "2")), true},
			{"no node", mustMarshal(t, req(nil, resourcev3.EndpointType, "3")), false},
			{"same node after none", mustMarshal(t, req(envoy, resourcev3.EndpointType, "4")), true},
			{"other node", mustMarshal(t, req(other, resourcev3.EndpointType, "5")), false},
			{"other length, same ends", mustMarshal(t, req(longer, resourcev3.EndpointType, "6")), false},
			{"back to the other node", mustMarshal(t, req(other, resourcev3.EndpointType, "7")), false},
			{"other tail, same length", mustMarshal(t, req(tail, resourcev3.EndpointType, "8")), false},
			{"node in two fields", append(mustMarshal(t, req(other, resourcev3.EndpointType, "9")), mustMarshal(t, req(second, "", ""))...), false},
			{"the second field's node alone", mustMarshal(t, req(second, resourcev3.EndpointType, "10")), false},
			{"a node after two", mustMarshal(t, req(other, resourcev3.EndpointType, "11")), false},
		}
		var memo nodeMemo
		var prev *corev3.Node
		for _, st := range steps {
			got := req(nil, "", "")
			if err := memo.decode(st.bytes, got); err != nil {
				t.Fatalf("delta=%v %s: %v", delta, st.name, err)
			}
			if want := wantDecoded(t, st.bytes, got); !proto.Equal(got, want) {
				t.Errorf("delta=%v %s: decoded\n%v\nwant\n%v", delta, st.name, got, want)
			}
			node := RequestNode(got)
			if st.reuse && node != prev {
				t.Errorf("delta=%v %s: node decoded again, want the previous request's", delta, st.name)
			}
			if !st.reuse && node != nil && node == prev {
				t.Errorf("delta=%v %s: node is the previous request's, want it decoded", delta, st.name)
			}
			if len(node.GetExtensions()) > 0 {
				t.Errorf("delta=%v %s: the kept node has %d extensions", delta, st.name, len(node.GetExtensions()))
			}
			if node != nil {
				prev = node
			}
		}
	}
}

// FuzzNodeMemo: whatever the bytes, the memo decodes as proto.Unmarshal
// does (the same error or the same message), after a request that
// filled it.
func FuzzNodeMemo(f *testing.F) {
	// A node over 2×nodeSample, so hits compare the ends only, and small
	// enough for the fuzzer to mutate quickly.
	envoy := &corev3.Node{Id: "web-1", Cluster: "web", Extensions: envoynode.Extensions()[:30]}
	first := mustMarshal(f, &discoveryv3.DeltaDiscoveryRequest{Node: envoy, TypeUrl: resourcev3.ClusterType})
	f.Add(first)
	if proto.Size(envoy) <= 2*nodeSample {
		f.Fatalf("the fuzz node is %d bytes, want over %d", proto.Size(envoy), 2*nodeSample)
	}
	f.Add(mustMarshal(f, &discoveryv3.DeltaDiscoveryRequest{Node: envoy, ResponseNonce: "1"}))
	f.Add(mustMarshal(f, &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "x"}, ResponseNonce: "1"}))
	f.Add([]byte{0x0a, 0x05, 0x0a})
	f.Fuzz(func(t *testing.T, b []byte) {
		var memo nodeMemo
		if err := memo.decode(first, &discoveryv3.DeltaDiscoveryRequest{}); err != nil {
			t.Fatal(err)
		}
		checkMemoDecode(t, &memo, b, &discoveryv3.DeltaDiscoveryRequest{})
	})
}

// checkMemoDecode decodes b through memo and compares the result, errors
// included, with proto.Unmarshal's. When the memo's node stands in for
// the request's (same length, same ends: its middle is by design not
// parsed, see nodeSample), what is compared is b without its node field,
// given the memo's node.
func checkMemoDecode(t *testing.T, memo *nodeMemo, b []byte, got proto.Message) {
	t.Helper()
	kept := memo.node
	err := memo.decode(b, got)
	want := got.ProtoReflect().New().Interface()
	in := b
	if err == nil && kept != nil && RequestNode(got) == kept {
		num, _ := nodeSlot(got)
		sc, ok := scanRequest(b, num, false, nil)
		if !ok || sc.nodes != 1 {
			t.Fatalf("the memo's node stood in for %d node fields", sc.nodes)
		}
		in = append(slices.Clip(b[:sc.nodeStart]), b[sc.nodeEnd:]...)
	}
	wantErr := proto.Unmarshal(in, want)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("memo error %v, proto.Unmarshal error %v", err, wantErr)
	}
	if err != nil {
		return
	}
	if len(in) != len(b) {
		SetNode(want, kept)
	} else if n := RequestNode(want); n != nil {
		trimNode(n)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("memo decoded %v, want %v", got, want)
	}
}

// BenchmarkDecodeEnvoyACK: an Envoy's delta ACK, node included (its
// default), decoded as gRPC's codec would and through a stream's memo.
func BenchmarkDecodeEnvoyACK(b *testing.B) {
	envoy := envoynode.New("web-1-sidecar-proxy", "web")
	first := mustMarshal(b, &discoveryv3.DeltaDiscoveryRequest{Node: envoy, TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"api", "db"}})
	ack := mustMarshal(b, &discoveryv3.DeltaDiscoveryRequest{Node: envoy, TypeUrl: resourcev3.EndpointType, ResponseNonce: "17"})
	b.Logf("node %d bytes, ACK %d bytes", proto.Size(envoy), len(ack))
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(ack, &discoveryv3.DeltaDiscoveryRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("memo", func(b *testing.B) {
		benchMemoDecode(b, first, ack, func() proto.Message { return &discoveryv3.DeltaDiscoveryRequest{} })
	})
}

// benchMemoDecode times decoding ack through a memo that decoded first.
func benchMemoDecode(b *testing.B, first, ack []byte, into func() proto.Message) {
	var memo nodeMemo
	if err := memo.decode(first, into()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := memo.decode(ack, into()); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSotwNamesMemo: a SotW request's resource names decode to what
// proto.Unmarshal gives; names with the bytes of the last request's, in
// order, are the slice of the type's last request, whatever else changed
// (node, nonce, version, requests of other types between); names that
// differ in any way are decoded.
func TestSotwNamesMemo(t *testing.T) {
	envoy := envoynode.New("web-1", "web")
	req := func(node *corev3.Node, nonce string, names ...string) []byte {
		return mustMarshal(t, &discoveryv3.DiscoveryRequest{VersionInfo: "v" + nonce, Node: node, TypeUrl: resourcev3.EndpointType, ResponseNonce: nonce, ResourceNames: names})
	}
	// A name field split from the others by the type URL: not in field
	// order, as a hand-rolled client might send it.
	split := append(req(nil, "9", "a"), mustMarshal(t, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"b", "c"}})...)
	wrongType := append(req(nil, "10", "a", "b"), 0x18, 0x01) // field 3 as a varint: an unknown field
	steps := []struct {
		name  string
		bytes []byte
		reuse bool // the names are the previous step's slice
	}{
		{"first", req(envoy, "", "a", "b", "c"), false},
		{"ACK, same names", req(envoy, "1", "a", "b", "c"), true},
		{"no node, same names", req(nil, "2", "a", "b", "c"), true},
		{"other node, same names", req(&corev3.Node{Id: "x", Cluster: "web"}, "3", "a", "b", "c"), true},
		{"one name fewer", req(nil, "4", "a", "b"), false},
		{"one name more", req(nil, "5", "a", "b", "c"), false},
		{"same names after a change", req(envoy, "6", "a", "b", "c"), true},
		{"other order", req(nil, "7", "a", "c", "b"), false},
		{"same length, other name", req(nil, "8", "a", "c", "d"), false},
		{"split around the type", split, false},
		{"the split names again, in order", req(nil, "11", "a", "b", "c"), true},
		{"none", req(nil, "12"), false},
		{"none again", req(nil, "13"), false},
		{"names after none", req(nil, "14", "a"), false},
		{"a name field of the wrong type", wrongType, false},
		{"the names of the one before (its odd field aside)", req(nil, "15", "a", "b"), true},
		{"another type's names between", mustMarshal(t, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.RouteType, ResponseNonce: "16", ResourceNames: []string{"a", "b"}}), false},
		{"the first type's names after another's", req(nil, "17", "a", "b"), true},
		{"no type field, same names", mustMarshal(t, &discoveryv3.DiscoveryRequest{ResponseNonce: "18", ResourceNames: []string{"a", "b"}}), false},
		{"the names again", req(nil, "19", "a", "b"), true},
		// Field 3's tag in two bytes (0x9a 0x00), as proto accepts it.
		{"a name with a long tag", append(req(nil, "20", "a"), 0x9a, 0x00, 0x01, 'b'), true},
		{"a long tag, then a run", append(append(req(nil, "21"), 0x9a, 0x00, 0x01, 'a'), 0x1a, 0x01, 'b'), true},
		{"a run, then the names' last apart", append(req(nil, "22", "a"), mustMarshal(t, &discoveryv3.DiscoveryRequest{ResponseNonce: "x", ResourceNames: []string{"b"}})...), true},
		{"a truncated name in the run", append(req(nil, "23", "a"), 0x1a, 0x05, 'b'), false},
	}
	var memo nodeMemo
	prevOf := map[string][]string{} // by type URL
	for _, st := range steps {
		got := &discoveryv3.DiscoveryRequest{ResourceNames: []string{"stale"}}
		err := memo.decode(st.bytes, got)
		wantErr := proto.Unmarshal(st.bytes, &discoveryv3.DiscoveryRequest{})
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%s: memo error %v, proto.Unmarshal error %v", st.name, err, wantErr)
		}
		if err != nil {
			continue
		}
		if want := wantDecoded(t, st.bytes, got); !proto.Equal(got, want) {
			t.Fatalf("%s: decoded\n%v\nwant\n%v", st.name, got, want)
		}
		names, prev := got.GetResourceNames(), prevOf[got.GetTypeUrl()]
		same := len(names) > 0 && len(prev) > 0 && &names[0] == &prev[0]
		if same != st.reuse {
			t.Fatalf("%s: names are the type's previous slice: %v, want %v", st.name, same, st.reuse)
		}
		prevOf[got.GetTypeUrl()] = names
	}
}

// FuzzSotwNamesMemo: whatever a SotW request holds, decoding it through
// a memo primed with another request's names and node gives what
// proto.Unmarshal gives, errors included.
func FuzzSotwNamesMemo(f *testing.F) {
	node := &corev3.Node{Id: "web-1", Cluster: "web", Extensions: envoynode.Extensions()[:30]}
	first := mustMarshal(f, &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"api", "db", "web"}})
	f.Add(first)
	f.Add(mustMarshal(f, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResponseNonce: "1", ResourceNames: []string{"api", "db", "web"}}))
	f.Add(mustMarshal(f, &discoveryv3.DiscoveryRequest{Node: node, ResponseNonce: "1", ResourceNames: []string{"api", "db"}}))
	f.Add([]byte{0x1a, 0x03, 'a', 'p', 'i', 0x1a, 0x01})
	f.Add([]byte{0x1a, 0x03, 'a', 'p', 'i', 0x9a, 0x00, 0x02, 'd', 'b', 0x1a, 0x03, 'w', 'e', 'b', 0x22, 0x01, 'x'})
	// Field 3 as a fixed32 (an unknown field), then the names' last.
	f.Add(append([]byte{0x1d, 0x03, 'a', 'p', 'i'}, mustMarshal(f, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"db", "web"}})...))
	f.Fuzz(func(t *testing.T, b []byte) {
		var memo nodeMemo
		if err := memo.decode(first, &discoveryv3.DiscoveryRequest{}); err != nil {
			t.Fatal(err)
		}
		checkMemoDecode(t, &memo, b, &discoveryv3.DiscoveryRequest{})
	})
}

// TestSotwNamesMemoBounds: a field 3 of another wire type is not a name
// (proto.Unmarshal keeps it as an unknown field), and a memo keeps the
// names of at most maxMemoTypes types, the latest.
func TestSotwNamesMemoBounds(t *testing.T) {
	var memo nodeMemo
	first := mustMarshal(t, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"api", "db"}})
	if err := memo.decode(first, &discoveryv3.DiscoveryRequest{}); err != nil {
		t.Fatal(err)
	}
	odd := append([]byte{0x1d, 0x03, 'a', 'p', 'i'}, mustMarshal(t, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"db"}})...)
	checkMemoDecode(t, &memo, odd, &discoveryv3.DiscoveryRequest{})

	for i := range 3 * maxMemoTypes {
		b := mustMarshal(t, &discoveryv3.DiscoveryRequest{TypeUrl: fmt.Sprintf("type.example/T%d", i), ResourceNames: []string{"n"}})
		if err := memo.decode(b, &discoveryv3.DiscoveryRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if len(memo.names) != maxMemoTypes || cap(memo.names) > 2*maxMemoTypes {
		t.Fatalf("memo keeps %d types (capacity %d), want %d", len(memo.names), cap(memo.names), maxMemoTypes)
	}
	for i, tn := range memo.names {
		if want := fmt.Sprintf("type.example/T%d", 2*maxMemoTypes+i); tn.typeURL != want {
			t.Fatalf("memo type %d is %s, want %s (the latest)", i, tn.typeURL, want)
		}
	}
	full := memo.names[:cap(memo.names)]
	for _, tn := range full[len(memo.names):] {
		if tn.names != nil {
			t.Fatalf("an evicted type's names are still referenced: %v", tn)
		}
	}
}

// BenchmarkDecodeSotwACK: a SotW EDS ACK naming the 50 clusters of S1's
// world (bench/README.md), decoded through a memo that holds them.
func BenchmarkDecodeSotwACK(b *testing.B) {
	names := make([]string, 50)
	for i := range names {
		names[i] = fmt.Sprintf("svc-%04d.default.dc1.internal", i)
	}
	first := mustMarshal(b, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-1", Cluster: "bench"}, TypeUrl: resourcev3.EndpointType, ResourceNames: names})
	ack := mustMarshal(b, &discoveryv3.DiscoveryRequest{VersionInfo: "4f2a9c", TypeUrl: resourcev3.EndpointType, ResourceNames: names, ResponseNonce: "17"})
	benchMemoDecode(b, first, ack, func() proto.Message { return &discoveryv3.DiscoveryRequest{} })
}

// TestDecodedNodeKeepsWhatIsRead: a stream keeps of an Envoy's node what
// the bridge reads (identity, metadata, user agent and its version), not
// its extensions, client features or build metadata.
func TestDecodedNodeKeepsWhatIsRead(t *testing.T) {
	sent := envoynode.New("sidecar-1", "web")
	if len(sent.GetExtensions()) == 0 || len(sent.GetClientFeatures()) == 0 || sent.GetUserAgentBuildVersion().GetMetadata() == nil {
		t.Fatal("the Envoy node lacks what this test drops")
	}
	var memo nodeMemo
	got := &discoveryv3.DeltaDiscoveryRequest{}
	if err := memo.decode(mustMarshal(t, &discoveryv3.DeltaDiscoveryRequest{Node: sent}), got); err != nil {
		t.Fatal(err)
	}
	n := got.GetNode()
	if n.GetId() != "sidecar-1" || n.GetCluster() != "web" || n.GetUserAgentName() != sent.GetUserAgentName() ||
		!proto.Equal(n.GetUserAgentBuildVersion().GetVersion(), sent.GetUserAgentBuildVersion().GetVersion()) ||
		!proto.Equal(n.GetMetadata(), sent.GetMetadata()) {
		t.Errorf("the kept node lost what the bridge reads: %v", n)
	}
	if len(n.GetExtensions()) != 0 || len(n.GetClientFeatures()) != 0 || n.GetUserAgentBuildVersion().GetMetadata() != nil {
		t.Errorf("the kept node holds what nothing reads: %d extensions, features %q, build metadata %v",
			len(n.GetExtensions()), n.GetClientFeatures(), n.GetUserAgentBuildVersion().GetMetadata())
	}
}

// TestKnownTypeURLIsTheConstant: a request naming a served type is given
// the package's constant, not a string decoded for it (every ACK carries
// one), SotW and delta; an unknown type URL, or two type fields (the last
// wins, as proto.Unmarshal has it), decodes as sent.
func TestKnownTypeURLIsTheConstant(t *testing.T) {
	var memo nodeMemo
	d := &discoveryv3.DeltaDiscoveryRequest{}
	if err := memo.decode(mustMarshal(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: "1"}), d); err != nil {
		t.Fatal(err)
	}
	s := &discoveryv3.DiscoveryRequest{}
	if err := memo.decode(mustMarshal(t, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"a"}}), s); err != nil {
		t.Fatal(err)
	}
	if unsafe.StringData(d.GetTypeUrl()) != unsafe.StringData(resourcev3.ClusterType) ||
		unsafe.StringData(s.GetTypeUrl()) != unsafe.StringData(resourcev3.EndpointType) {
		t.Errorf("type URLs %q and %q were decoded, not given the constants", d.GetTypeUrl(), s.GetTypeUrl())
	}
	for _, b := range [][]byte{
		mustMarshal(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: "type.example/Other"}),
		append(mustMarshal(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType}),
			mustMarshal(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.RouteType})...),
	} {
		checkMemoDecode(t, &memo, b, &discoveryv3.DeltaDiscoveryRequest{})
	}
}

// TestSmallNonceIsTheConstant: an ACK of one of a stream's first hundred
// responses is given strconv's constant for its nonce, SotW and delta;
// any other nonce ("007", "100", two nonce fields) decodes as sent.
func TestSmallNonceIsTheConstant(t *testing.T) {
	for sotw, m := range map[bool]proto.Message{true: &discoveryv3.DiscoveryRequest{}, false: &discoveryv3.DeltaDiscoveryRequest{}} {
		if f := m.ProtoReflect().Descriptor().Fields().ByName("response_nonce"); f == nil || f.Number() != requestNonceField(sotw) {
			t.Fatalf("%T: response_nonce is %v, want field %d", m, f, requestNonceField(sotw))
		}
	}
	var memo nodeMemo
	d := &discoveryv3.DeltaDiscoveryRequest{}
	if err := memo.decode(mustMarshal(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: "42"}), d); err != nil {
		t.Fatal(err)
	}
	s := &discoveryv3.DiscoveryRequest{}
	if err := memo.decode(mustMarshal(t, &discoveryv3.DiscoveryRequest{VersionInfo: "v", ResponseNonce: "7"}), s); err != nil {
		t.Fatal(err)
	}
	if unsafe.StringData(d.GetResponseNonce()) != unsafe.StringData(strconv.Itoa(42)) || unsafe.StringData(s.GetResponseNonce()) != unsafe.StringData(strconv.Itoa(7)) {
		t.Errorf("nonces %q and %q were decoded, not given the constants", d.GetResponseNonce(), s.GetResponseNonce())
	}
	for _, nonce := range []string{"007", "100", "0", "x"} {
		checkMemoDecode(t, &memo, mustMarshal(t, &discoveryv3.DeltaDiscoveryRequest{ResponseNonce: nonce}), &discoveryv3.DeltaDiscoveryRequest{})
		checkMemoDecode(t, &memo, mustMarshal(t, &discoveryv3.DiscoveryRequest{ResponseNonce: nonce}), &discoveryv3.DiscoveryRequest{})
	}
	two := append(mustMarshal(t, &discoveryv3.DeltaDiscoveryRequest{ResponseNonce: "3"}), mustMarshal(t, &discoveryv3.DeltaDiscoveryRequest{ResponseNonce: "4"})...)
	got := &discoveryv3.DeltaDiscoveryRequest{}
	checkMemoDecode(t, &memo, two, got)
	if got.GetResponseNonce() != "4" {
		t.Errorf("two nonce fields decoded as %q, want the last", got.GetResponseNonce())
	}
}
