package bench

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
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
