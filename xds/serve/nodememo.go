package serve

import (
	"hash/maphash"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A stream's node, decoded once.
//
// Envoy sends its whole node with every discovery request unless its
// bootstrap sets set_node_on_first_message_only, and an Envoy's node
// lists every extension it was built with: 11–24 KiB, decoded into
// hundreds of messages, on every ACK of every proxy. A stream remembers a
// hash of the node bytes its last request carried and the node decoded
// from them; a request carrying the same bytes is decoded without them
// and given that node. A node that differs is decoded again (and the
// servers refuse a changed identity as before): a different length, or
// different bytes at either end (nodeSample).
//
// What a stream keeps of a node is what the bridge reads: a decoded node
// loses its extension list, the bulk of it, which nothing here uses.

// nodeSeed keys the node hashes.
var nodeSeed = maphash.MakeSeed()

// nodeSample is how much of each end of a node's encoding its hash reads;
// hashing all of an Envoy's 24 KiB took 3.3 µs per ACK. A node's identity
// (id and cluster, fields 1 and 2) is encoded first, within the head.
//
// A node whose bytes differ from the one before only between head and
// tail, at the same length, is taken for it, its middle not even parsed
// (bytes proto.Unmarshal would refuse included). What that keeps is a
// node the same stream sent before, which went through every check a
// node meets (the tracker's, authorization's, sidecar keying's; each
// refusal ends the stream, memo and all): a client gains no identity by
// it, only loses a change it made to its own node. Envoy's node does not
// change within a stream (it comes from its bootstrap).
const nodeSample = 512

// nodeSum is the hash of a node's encoding that decode compares.
func nodeSum(b []byte) uint64 {
	if len(b) <= 2*nodeSample {
		return maphash.Bytes(nodeSeed, b)
	}
	var h maphash.Hash
	h.SetSeed(nodeSeed)
	_, _ = h.Write(b[:nodeSample])
	_, _ = h.Write(b[len(b)-nodeSample:])
	return h.Sum64()
}

// nodeDecodes counts the nodes decoded in full (tests).
var nodeDecodes atomic.Int64

// nodeMemo is one stream's last node.
type nodeMemo struct {
	// sum is nodeSum of the node field (tag and length included, so the
	// head tells lengths apart too), size its length.
	sum  uint64
	size int
	node *corev3.Node
}

// memoRequest is what the servers' streams read a request into: the
// codec (sharedCodec.Unmarshal) decodes the bytes into into, through
// memo.
type memoRequest struct {
	memo *nodeMemo
	into proto.Message
}

// nodeField is the field number of a request type's node.
func nodeField(m any) (protowire.Number, bool) {
	num, slot := nodeSlot(m)
	return num, slot != nil
}

// nodeSlot is a request's node field: its number and where the message
// holds it; nil for anything but the two discovery requests.
func nodeSlot(m any) (protowire.Number, **corev3.Node) {
	switch r := m.(type) {
	case *discoveryv3.DeltaDiscoveryRequest:
		return 1, &r.Node
	case *discoveryv3.DiscoveryRequest:
		return 2, &r.Node
	}
	return 0, nil
}

// requestNode is the node a request carries, nil if none.
func requestNode(m any) *corev3.Node {
	if _, slot := nodeSlot(m); slot != nil {
		return *slot
	}
	return nil
}

// setNode gives a request node (nothing for other messages).
func setNode(m any, node *corev3.Node) {
	if _, slot := nodeSlot(m); slot != nil {
		*slot = node
	}
}

// decode decodes b into into as proto.Unmarshal would, except that a
// node with the bytes of the memo's is the memo's node, and a node it
// decodes has no extensions.
func (m *nodeMemo) decode(b []byte, into proto.Message) error {
	num, _ := nodeField(into)
	start, end, count := findNode(b, num)
	var sum uint64
	if count == 1 {
		sum = nodeSum(b[start:end])
	}
	if count == 1 && m.node != nil && end-start == m.size && sum == m.sum {
		proto.Reset(into)
		merge := proto.UnmarshalOptions{Merge: true}
		if err := merge.Unmarshal(b[:start], into); err != nil {
			return err
		}
		if err := merge.Unmarshal(b[end:], into); err != nil {
			return err
		}
		setNode(into, m.node)
		return nil
	}
	if err := proto.Unmarshal(b, into); err != nil {
		return err
	}
	node := requestNode(into)
	if node != nil {
		nodeDecodes.Add(1)
		node.Extensions = nil
	}
	switch count {
	case 0: // the stream's node stays what it was
	case 1:
		m.sum, m.size, m.node = sum, end-start, node
	default: // merged from several fields: not worth remembering
		*m = nodeMemo{}
	}
	return nil
}

// findNode returns where the node field num starts and ends in b (tag
// and length included) and how many node fields b holds; count is 0 when
// b does not parse, and proto.Unmarshal then reports why.
func findNode(b []byte, num protowire.Number) (start, end, count int) {
	for off := 0; off < len(b); {
		n, typ, tagLen := protowire.ConsumeTag(b[off:])
		if tagLen < 0 {
			return 0, 0, 0
		}
		valLen := protowire.ConsumeFieldValue(n, typ, b[off+tagLen:])
		if valLen < 0 {
			return 0, 0, 0
		}
		if n == num && typ == protowire.BytesType {
			start, end = off, off+tagLen+valLen
			count++
		}
		off += tagLen + valLen
	}
	return start, end, count
}

// Unmarshal decodes a memoRequest through its stream's memo, anything
// else as gRPC's proto codec does.
func (c sharedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*memoRequest)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return r.memo.decode(data[0].ReadOnlyData(), r.into)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return r.memo.decode(buf.ReadOnlyData(), r.into)
}

// memoStream reads a stream's discovery requests through its node memo.
type memoStream struct {
	grpc.ServerStream
	memo nodeMemo
	req  memoRequest // reused: a stream has one reader
}

func (s *memoStream) RecvMsg(m any) error {
	if pm, ok := m.(proto.Message); ok {
		if _, ok := nodeField(pm); ok {
			s.req = memoRequest{memo: &s.memo, into: pm}
			err := s.ServerStream.RecvMsg(&s.req)
			s.req.into = nil // not kept past the read
			return err
		}
	}
	return s.ServerStream.RecvMsg(m)
}

// nodeMemoInterceptor is the first of the server's interceptors, so
// every later one reads requests through the memo.
func nodeMemoInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &memoStream{ServerStream: ss})
}
