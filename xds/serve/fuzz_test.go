package serve

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/rs/zerolog"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// fuzzServer is one Server, serving a small translation over an in-memory
// listener, shared by every input of a fuzzing run.
var fuzzServer = sync.OnceValues(func() (*grpc.ClientConn, error) {
	s := NewServer(ServerConfig{Logger: zerolog.Nop(), ShutdownGrace: time.Second})
	if _, err := s.Update(context.Background(), testOutput(nilTB{}, []string{"api", "web"}, 8080), resolveEdge); err != nil {
		return nil, err
	}
	lis := bufconn.Listen(1 << 20)
	go func() { _ = s.Serve(context.Background(), lis) }()
	return grpc.NewClient("passthrough:///fuzz", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
})

// FuzzXDSRequest sends two arbitrary requests (any bytes that decode as
// a DiscoveryRequest or DeltaDiscoveryRequest) on one stream of one of
// four services, then closes its side. Whatever they hold, the server
// must not crash and must end the stream promptly (a hang or a panic in
// any server goroutine fails the run), and keeps serving the next input.
func FuzzXDSRequest(f *testing.F) {
	node := &corev3.Node{Id: "fuzz-1", Cluster: "edge", UserAgentName: "envoy"}
	meta, _ := structpb.NewStruct(map[string]any{"k": []any{"a", 1.0, map[string]any{"x": true}}})
	sotw := []*discoveryv3.DiscoveryRequest{
		{Node: node, TypeUrl: resourcev3.ClusterType},
		{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"api", "web", "nope"}},
		{TypeUrl: resourcev3.ListenerType, VersionInfo: "1", ResponseNonce: "1", ErrorDetail: &rpcstatus.Status{Code: 3, Message: "rejected"}},
		{Node: &corev3.Node{Id: "m", Cluster: "*", Metadata: meta}, TypeUrl: "type.googleapis.com/made.up", ResourceNames: []string{"*"}},
		{},
	}
	delta := []*discoveryv3.DeltaDiscoveryRequest{
		{Node: node, TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"*"}},
		{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"api"}, InitialResourceVersions: map[string]string{"api": "x"}},
		{TypeUrl: resourcev3.EndpointType, ResourceNamesUnsubscribe: []string{"api"}, ResponseNonce: "2", ErrorDetail: &rpcstatus.Status{Message: "no"}},
		{Node: &corev3.Node{Cluster: "edge"}, TypeUrl: resourcev3.SecretType, ResourceNamesSubscribe: []string{"S/cert"}},
	}
	for mode := range byte(4) {
		var msgs []proto.Message
		if mode%2 == 0 {
			for _, r := range sotw {
				msgs = append(msgs, r)
			}
		} else {
			for _, r := range delta {
				msgs = append(msgs, r)
			}
		}
		for i := range msgs {
			a, _ := proto.Marshal(msgs[i])
			b, _ := proto.Marshal(msgs[(i+1)%len(msgs)])
			f.Add(mode, a, b)
		}
	}
	f.Fuzz(func(t *testing.T, mode byte, first, second []byte) {
		conn, err := fuzzServer()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var st grpc.ClientStream
		var msgs []proto.Message
		switch mode % 4 {
		case 0, 2:
			for _, b := range [][]byte{first, second} {
				r := &discoveryv3.DiscoveryRequest{}
				if proto.Unmarshal(b, r) != nil {
					return
				}
				msgs = append(msgs, r)
			}
			if mode%4 == 0 {
				st, err = discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
			} else {
				st, err = clusterservice.NewClusterDiscoveryServiceClient(conn).StreamClusters(ctx)
			}
		default:
			for _, b := range [][]byte{first, second} {
				r := &discoveryv3.DeltaDiscoveryRequest{}
				if proto.Unmarshal(b, r) != nil {
					return
				}
				msgs = append(msgs, r)
			}
			if mode%4 == 1 {
				st, err = discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
			} else {
				st, err = endpointservice.NewEndpointDiscoveryServiceClient(conn).DeltaEndpoints(ctx)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if st.SendMsg(m) != nil {
				break // the server ended the stream (a refusal)
			}
		}
		_ = st.CloseSend()
		for {
			var resp proto.Message = &discoveryv3.DiscoveryResponse{}
			if mode%2 == 1 {
				resp = &discoveryv3.DeltaDiscoveryResponse{}
			}
			err := st.RecvMsg(resp)
			if err == nil {
				continue
			}
			if ctx.Err() != nil {
				t.Fatalf("the stream did not end within 5s of the client closing its side")
			}
			// io.EOF, or a refusal's status: both end the stream cleanly.
			return
		}
	})
}

// nilTB lets the shared fuzz server build its fixture outside any test.
type nilTB struct{ testing.TB }

func (nilTB) Helper()               {}
func (nilTB) Fatal(args ...any)     { panic(args) }
func (nilTB) Fatalf(string, ...any) { panic("fixture") }
