package cache

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

// TestTrimDeltaRequest: a watch keeps a plain ACK as it is, and of any
// other request only its node, type and nonce (a subscription's names, a
// NACK's text or junk a client added are not kept while it waits).
func TestTrimDeltaRequest(t *testing.T) {
	node := &corev3.Node{Id: "web-1"}
	ack := &discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResponseNonce: "7"}
	if got := trimDeltaRequest(ack); got != ack {
		t.Errorf("a plain ACK was copied")
	}
	if n := testing.AllocsPerRun(100, func() { trimDeltaRequest(ack) }); n != 0 {
		t.Errorf("keeping a plain ACK allocates %v times; want none (one per proxy per change before)", n)
	}
	junk := &discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResponseNonce: "7"}
	junk.ProtoReflect().SetUnknown([]byte{0xfa, 0x3f, 0x02, 'x', 'y'}) // field 1023, 2 bytes
	for _, r := range []*discoveryv3.DeltaDiscoveryRequest{
		{Node: node, TypeUrl: resourcev3.EndpointType, ResponseNonce: "7", ResourceNamesSubscribe: []string{"a"}},
		{Node: node, TypeUrl: resourcev3.EndpointType, ResponseNonce: "7", ResourceNamesUnsubscribe: []string{"a"}},
		{Node: node, TypeUrl: resourcev3.EndpointType, ResponseNonce: "7", InitialResourceVersions: map[string]string{"a": "1"}},
		{Node: node, TypeUrl: resourcev3.EndpointType, ResponseNonce: "7", ErrorDetail: &rpcstatus.Status{Message: "bad"}},
		{Node: node, TypeUrl: resourcev3.EndpointType, ResponseNonce: "7", ResourceLocatorsSubscribe: []*discoveryv3.ResourceLocator{{Name: "a"}}},
		junk,
	} {
		got := trimDeltaRequest(r)
		if got == r || !proto.Equal(got, ack) || got.GetNode() != node {
			t.Errorf("trimmed %v to %v; want a copy with only the node, type and nonce", r, got)
		}
	}
}
