package serve

import (
	"context"
	"crypto/x509"
	"io"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// queuedStream is a server stream whose client sent msgs.
type queuedStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs []*discoveryv3.DiscoveryRequest
}

func (q *queuedStream) Context() context.Context { return q.ctx }

func (q *queuedStream) RecvMsg(m any) error {
	if len(q.msgs) == 0 {
		return io.EOF
	}
	proto.Merge(m.(proto.Message), q.msgs[0])
	q.msgs = q.msgs[1:]
	return nil
}

// TestAuthorizationChecksTheReplayedFirstRequest: behind the first-request
// interceptor, authorization checks the request that interceptor read and
// replays (no second read or copy); alone, it reads the first request
// itself. Either way the handler gets every request once, in order, the
// first one checked before it, and a later change of node ends the stream.
func TestAuthorizationChecksTheReplayedFirstRequest(t *testing.T) {
	a := &corev3.Node{Id: "a", Cluster: "edge"}
	req := func(node *corev3.Node, nonce string) *discoveryv3.DiscoveryRequest {
		return &discoveryv3.DiscoveryRequest{Node: node, ResponseNonce: nonce}
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: tlsInfoWith(&x509.Certificate{})})
	info := &grpc.StreamServerInfo{FullMethod: "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"}
	for _, behind := range []bool{true, false} {
		var checked []string
		authorize := func(_ *x509.Certificate, n *corev3.Node) (bool, string) {
			checked = append(checked, n.GetId())
			return n.GetId() == "a", ""
		}
		var ss grpc.ServerStream = &queuedStream{ctx: ctx, msgs: []*discoveryv3.DiscoveryRequest{req(a, ""), req(nil, "1"), req(&corev3.Node{Id: "b", Cluster: "edge"}, "2")}}
		var rs *replayStream
		if behind {
			q := ss.(*queuedStream)
			rs = &replayStream{ServerStream: q, first: q.msgs[0]}
			ss, q.msgs = rs, q.msgs[1:]
		}
		var nonces []string
		err := authzInterceptor(zerolog.Nop(), authorize)(nil, ss, info, func(_ any, s grpc.ServerStream) error {
			if len(checked) != 1 {
				t.Fatalf("behind=%v: the handler ran with %d checks, want the first request checked", behind, len(checked))
			}
			if behind && rs.first == nil {
				t.Fatal("authorization read the replayed first request itself (and replays a copy): want it checked where it is")
			}
			for {
				m := &discoveryv3.DiscoveryRequest{}
				if err := s.RecvMsg(m); err != nil {
					return err
				}
				nonces = append(nonces, "<"+m.GetResponseNonce()+">")
			}
		})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("behind=%v: stream ended with %v, want PermissionDenied for node b", behind, err)
		}
		if got := len(nonces); got != 2 || nonces[0] != "<>" || nonces[1] != "<1>" {
			t.Fatalf("behind=%v: handler got %v, want the first request and the next, once each", behind, nonces)
		}
		if len(checked) != 1 {
			t.Fatalf("behind=%v: authorized %v, want a once (b is refused as a change of node)", behind, checked)
		}
	}
}

func tlsInfoWith(cert *x509.Certificate) credentials.TLSInfo {
	var ti credentials.TLSInfo
	ti.State.PeerCertificates = []*x509.Certificate{cert}
	return ti
}
