package bench

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
)

// The "raw" floor server decodes and encodes nothing: its codec keeps a
// request's bytes and its handler answers the first with an empty
// message, then only receives. It answers whether the handler goroutine's
// 8 KiB stack (half a proxy's stacks at rest) is the decoding's, which a
// server could move to other goroutines, or gRPC's own path to the
// handler: the same 18.1 KiB per connection says gRPC's (bench/README.md,
// "The floor, measured").

type rawFrame struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.(*rawFrame).b, nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	v.(*rawFrame).b = append([]byte(nil), data...)
	return nil
}

// Name is "proto" so that clients' content-type matches.
func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}

func rawOptions() []grpc.ServerOption { return []grpc.ServerOption{grpc.ForceServerCodec(rawCodec{})} }

// registerRaw serves both ADS methods with the raw handler.
func registerRaw(g *grpc.Server) {
	h := func(_ any, ss grpc.ServerStream) error {
		var f rawFrame
		if err := ss.RecvMsg(&f); err != nil {
			return err
		}
		if err := ss.SendMsg(&rawFrame{b: []byte{}}); err != nil {
			return err
		}
		for {
			if err := ss.RecvMsg(&f); err != nil {
				return err
			}
		}
	}
	g.RegisterService(&grpc.ServiceDesc{ServiceName: "envoy.service.discovery.v3.AggregatedDiscoveryService", HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{
			{StreamName: "DeltaAggregatedResources", Handler: h, ServerStreams: true, ClientStreams: true},
			{StreamName: "StreamAggregatedResources", Handler: h, ServerStreams: true, ClientStreams: true},
		}}, nil)
}
