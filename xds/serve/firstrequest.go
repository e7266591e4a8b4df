package serve

import (
	"errors"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// defaultFirstRequestTimeout is how long a new xDS stream may stay silent.
// Envoy and gRPC clients send their first request as soon as they open a
// stream; one that sends nothing holds a stream (of 1,000 per connection)
// and memory for nothing, so it is closed.
const defaultFirstRequestTimeout = 30 * time.Second

// firstRequestInterceptor ends xDS streams whose first request does not
// arrive within timeout, with DeadlineExceeded; onIdle counts them. The
// first request is read here and replayed to the handler: the servers'
// handlers end a stream only when its read fails or the server stops, and
// a silent stream must not hold its handler that long.
func firstRequestInterceptor(timeout time.Duration, onIdle func()) grpc.StreamServerInterceptor {
	waits := newFirstWaits()
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !strings.HasPrefix(info.FullMethod, "/envoy.service.") {
			return handler(srv, ss) // e.g. gRPC health
		}
		var first proto.Message = &discoveryv3.DiscoveryRequest{}
		if strings.Contains(info.FullMethod, "Delta") {
			first = &discoveryv3.DeltaDiscoveryRequest{}
		}
		// Room for the read's answer and the wait's end (newFirstWaits).
		got := make(chan error, 2)
		// This read ends when the stream does: returning below ends it.
		go func() { got <- ss.RecvMsg(first) }()
		waits.add(got, timeout)
		err := awaitFirst(ss, got, timeout, onIdle)
		waits.remove(got)
		if err != nil {
			return err
		}
		// The xDS protocol puts the node in a stream's first request.
		// Without it the stream would be served as node.cluster "",
		// which a "*" group matches (REST answers 400 the same way, and
		// authorize_nodes refused it already).
		if n, ok := first.(interface{ GetNode() *corev3.Node }); ok && n.GetNode() == nil {
			return status.Error(codes.InvalidArgument, "the first xDS request of a stream must carry its node (id and cluster)")
		}
		return handler(srv, &replayStream{ServerStream: ss, first: first})
	}
}

// awaitFirst waits for the first read, or for its wait to run out
// (newFirstWaits).
func awaitFirst(ss grpc.ServerStream, got <-chan error, timeout time.Duration, onIdle func()) error {
	select {
	case err := <-got:
		if errors.Is(err, errNoFirstRequest) {
			onIdle()
			return status.Errorf(codes.DeadlineExceeded, "no xDS request within %s of opening the stream; silent streams are closed", timeout)
		}
		return err
	case <-ss.Context().Done():
		return status.FromContextError(ss.Context().Err()).Err()
	}
}

// replayStream hands the request already read back to the handler's first
// RecvMsg.
type replayStream struct {
	grpc.ServerStream
	first proto.Message
}

func (s *replayStream) RecvMsg(m any) error {
	if s.first != nil {
		// Sharing what the first request holds (its node above all)
		// rather than copying it: the request was read for this handler
		// only.
		replay(s.first, m.(proto.Message))
		s.first = nil
		return nil
	}
	return s.ServerStream.RecvMsg(m)
}

// replay gives dst, empty, the fields of src, shared. The two discovery
// requests field by field: through protoreflect it was ~0.8 KiB of
// garbage a stream at a fleet's connect (bench/README.md, "Where a
// storm's memory stays"). TestReplayKeepsEveryField fails when a request
// gains a field this does not copy.
func replay(src, dst proto.Message) {
	switch f := src.(type) {
	case *discoveryv3.DeltaDiscoveryRequest:
		if d, ok := dst.(*discoveryv3.DeltaDiscoveryRequest); ok {
			d.Node, d.TypeUrl, d.ResponseNonce, d.ErrorDetail = f.Node, f.TypeUrl, f.ResponseNonce, f.ErrorDetail
			d.ResourceNamesSubscribe, d.ResourceNamesUnsubscribe = f.ResourceNamesSubscribe, f.ResourceNamesUnsubscribe
			d.ResourceLocatorsSubscribe, d.ResourceLocatorsUnsubscribe = f.ResourceLocatorsSubscribe, f.ResourceLocatorsUnsubscribe
			d.InitialResourceVersions = f.InitialResourceVersions
			d.ProtoReflect().SetUnknown(f.ProtoReflect().GetUnknown())
			return
		}
	case *discoveryv3.DiscoveryRequest:
		if d, ok := dst.(*discoveryv3.DiscoveryRequest); ok {
			d.VersionInfo, d.Node, d.TypeUrl, d.ResponseNonce, d.ErrorDetail = f.VersionInfo, f.Node, f.TypeUrl, f.ResponseNonce, f.ErrorDetail
			d.ResourceNames, d.ResourceLocators = f.ResourceNames, f.ResourceLocators
			d.ProtoReflect().SetUnknown(f.ProtoReflect().GetUnknown())
			return
		}
	}
	d, sr := dst.ProtoReflect(), src.ProtoReflect()
	sr.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		d.Set(fd, v)
		return true
	})
	d.SetUnknown(sr.GetUnknown())
}
