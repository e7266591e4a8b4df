package bench

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/envoynode"
)

// TestEnvoyNodeOnRequests: the node a client sends with -envoy-node, made
// of its identity and the shared rest, decodes as the Envoy node itself,
// in delta and SotW requests.
func TestEnvoyNodeOnRequests(t *testing.T) {
	want := envoynode.New("web-7", "web")
	// The requests carry the client's own small node, which the Envoy
	// node must replace, not join.
	small := func() *corev3.Node { return &corev3.Node{Id: "x", ClientFeatures: []string{"f"}} }
	for _, m := range []proto.Message{&discoveryv3.DeltaDiscoveryRequest{TypeUrl: "t", Node: small()}, &discoveryv3.DiscoveryRequest{TypeUrl: "t", Node: small()}} {
		c := &Client{mode: SotW}
		if _, delta := m.(*discoveryv3.DeltaDiscoveryRequest); delta {
			c.mode = Delta
		}
		c.setEnvoyNode("web-7", "web")
		b, err := proto.Marshal(c.withNode(m))
		if err != nil {
			t.Fatal(err)
		}
		got := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(b, got); err != nil {
			t.Fatal(err)
		}
		var node *corev3.Node
		switch r := got.(type) {
		case *discoveryv3.DeltaDiscoveryRequest:
			node = r.GetNode()
		case *discoveryv3.DiscoveryRequest:
			node = r.GetNode()
		}
		if !proto.Equal(node, want) {
			t.Errorf("%T carries node %v, want the Envoy node", m, node)
		}
	}
}

// TestSotwACKEncoding: the encoded ACK the HTTP/2 client sends decodes as
// the request grpc-go's client is given (node, names, type, version,
// nonce), with the small node and with an Envoy node, and follows the
// names, version and nonce from one ACK to the next.
func TestSotwACKEncoding(t *testing.T) {
	for _, envoy := range []bool{false, true} {
		c := &Client{mode: SotW, node: &corev3.Node{Id: "web-7", Cluster: "web", UserAgentName: "envoy"}}
		want := func(names []string) *discoveryv3.DiscoveryRequest {
			return &discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: typeURLs[EDS], ResourceNames: names, VersionInfo: c.version[EDS], ResponseNonce: c.nonce[EDS]}
		}
		if envoy {
			c.setEnvoyNode("web-7", "web")
			en := envoynode.New("web-7", "web")
			want = func(names []string) *discoveryv3.DiscoveryRequest {
				return &discoveryv3.DiscoveryRequest{Node: en, TypeUrl: typeURLs[EDS], ResourceNames: names, VersionInfo: c.version[EDS], ResponseNonce: c.nonce[EDS]}
			}
		}
		names := []string{"a", "b"}
		for k, step := range []func(){
			func() {}, // the first request: no version, no nonce
			func() { c.version[EDS], c.nonce[EDS] = "v1", "1" },
			func() { c.version[EDS], c.nonce[EDS] = "v2", "2" },
			func() { names = []string{"a", "b", "c"}; c.nonce[EDS] = "3" },
			func() { names[0] = "z"; c.nonce[EDS] = "4" }, // the same slice, changed in place
		} {
			step()
			before := c.acks[EDS].b
			b := c.appendSotwACK([]byte{}, EDS, names)
			if k == 2 && &before[0] != &c.acks[EDS].b[0] {
				t.Errorf("envoy node %v: the names' encoding was made again for the same names", envoy)
			}
			var got discoveryv3.DiscoveryRequest
			if err := proto.Unmarshal(b, &got); err != nil {
				t.Fatalf("envoy node %v, ACK %d: %v", envoy, k, err)
			}
			if w := want(names); !proto.Equal(&got, w) {
				t.Errorf("envoy node %v, ACK %d:\n got %v\nwant %v", envoy, k, &got, w)
			}
			// Fields in Envoy's order, each once.
			last := protowire.Number(0)
			for rest := b; len(rest) > 0; {
				num, _, n := protowire.ConsumeField(rest)
				if n < 0 || num < last || num == last && num != 3 { // names (3) repeat
					t.Fatalf("envoy node %v, ACK %d: field %d after %d", envoy, k, num, last)
				}
				last, rest = num, rest[n:]
			}
		}
		// The ~24 KiB Envoy node is the client's once, not again per type.
		if n := len(c.acks[EDS].b); n > 1024 {
			t.Errorf("envoy node %v: %d bytes kept per type for ACKs, want the names and type alone", envoy, n)
		}
	}
}

// BenchmarkSotwACK: an EDS ACK naming 50 clusters, encoded whole as
// grpc-go's client does (marshal) and from its encoded fields (encoded).
func BenchmarkSotwACK(b *testing.B) {
	c := &Client{mode: SotW, node: &corev3.Node{Id: "web-7", Cluster: "web", UserAgentName: "envoy", ClientFeatures: []string{"envoy.lb.does_not_support_overprovisioning", "envoy.lrs.supports_send_all_clusters"}}}
	var names []string
	for k := range 50 {
		names = append(names, "svc-00"+string(rune('a'+k/10))+string(rune('0'+k%10)))
	}
	c.version[EDS], c.nonce[EDS] = "v1234567", "42"
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := c.withNode(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: typeURLs[EDS], ResourceNames: names, VersionInfo: c.version[EDS], ResponseNonce: c.nonce[EDS]})
			if _, err := (proto.MarshalOptions{}).MarshalAppend(nil, m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoded", func(b *testing.B) {
		b.ReportAllocs()
		out := make([]byte, 0, 2048)
		for b.Loop() {
			out = c.appendSotwACK(out[:0], EDS, names)
		}
	})
}
