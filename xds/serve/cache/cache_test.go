package cache

import (
	"runtime"
	"testing"
	"weak"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
)

// TestWatchKeepsNoRequest: a filed watch, and the answer it gets, keep
// the stream's node and nothing else of the request that filed it (not
// its names, nonce or NACK text): a fleet's streams each wait on every
// type, and the requests were ~0.8 KiB a proxy. The answer still says
// whom it answers.
func TestWatchKeepsNoRequest(t *testing.T) {
	node := &corev3.Node{Id: "web-1", Cluster: "web"}
	c := New(Config{})
	var got []any
	var deltaReq weak.Pointer[discoveryv3.DeltaDiscoveryRequest]
	var sotwReq weak.Pointer[discoveryv3.DiscoveryRequest]
	func() {
		dr := &discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResponseNonce: "7",
			ResourceNamesSubscribe: []string{"api"}, ErrorDetail: &rpcstatus.Status{Message: "bad"}}
		sr := &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResponseNonce: "7", VersionInfo: "1",
			ResourceNames: []string{"api"}}
		deltaReq = weak.Make(dr)
		sotwReq = weak.Make(sr)
		_ = c.OpenDelta(1, dr, NewDeltaSubscription([]string{"api"}, nil, nil), func(r cachev3.DeltaResponse) { got = append(got, r) })
		_ = c.OpenSotw(2, sr, NewSotwSubscription([]string{"api"}), false, func(r cachev3.Response) { got = append(got, r) })
	}()
	runtime.GC()
	runtime.GC()
	if deltaReq.Value() != nil {
		t.Error("a filed delta watch keeps the request that filed it")
	}
	if sotwReq.Value() != nil {
		t.Error("a filed SotW watch keeps the request that filed it")
	}
	c.Set(Key(node), map[string]*Set{resourcev3.EndpointType: endpointSet(t, map[string]uint32{"api": 1})})
	if len(got) != 2 {
		t.Fatalf("%d answers, want one per watch", len(got))
	}
	for _, a := range got {
		var r interface {
			GetNode() *corev3.Node
			GetTypeUrl() string
		}
		switch a := a.(type) {
		case cachev3.DeltaResponse:
			r = a.GetDeltaRequest()
		case cachev3.Response:
			r = a.GetRequest()
		}
		if r.GetNode() != node || r.GetTypeUrl() != resourcev3.EndpointType {
			t.Errorf("%T says it answers %v", a, r)
		}
	}
}
