package cache

import (
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
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
// What a stream keeps of a node is what the bridge reads (trimNode).

// trimNode drops what the bridge never reads of a decoded node, which
// every stream would keep for its life: the extension list (the bulk of
// an Envoy's node), the client features, listening addresses, dynamic
// parameters and the build's metadata (of the build version, only the
// version is read: envoycompat.FromNode). Kept: id, cluster, metadata
// (sidecar keying and relayed agents read keys of it), locality and the
// user agent.
func trimNode(n *corev3.Node) {
	n.Extensions, n.ClientFeatures, n.ListeningAddresses, n.DynamicParameters = nil, nil, nil, nil
	if bv := n.GetUserAgentBuildVersion(); bv != nil {
		bv.Metadata = nil
	}
}

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

// nodeDecodes counts the nodes decoded in full.
var nodeDecodes atomic.Int64

// NodeDecodes is how many nodes this process decoded in full: what the
// servers' tests read to see that a stream's node is decoded once.
func NodeDecodes() int64 { return nodeDecodes.Load() }

// nodeMemo is one stream's last node and, for SotW, the resource names
// its last request carried: a SotW ACK repeats every name the stream
// follows (an edge proxy's, every cluster), and decoding them was an
// eighth of a SotW push's cost (50 names: ~8 µs and 50 strings per ACK).
// Names whose bytes are the last request's, in order, are that request's
// slice (compared in full: a false match would be a wrong subscription);
// names in one run of entries are read and skipped as a run (nameRun).
type nodeMemo struct {
	// sum is nodeSum of the node field (tag and length included, so the
	// head tells lengths apart too), size its length.
	sum   uint64
	size  int
	node  *corev3.Node
	names []typeNames // by type URL, the last few types'
}

// typeNames is the resource names a stream's last SotW request of a type
// carried.
type typeNames struct {
	typeURL string
	names   []string
}

// maxMemoTypes bounds the types whose names a memo keeps: a client may
// make up type URLs (the tracker refuses more than 16 per stream).
const maxMemoTypes = 8

// namesOf is the names remembered for the type URL t (bytes), nil if none.
func (m *nodeMemo) namesOf(t []byte) []string {
	for _, tn := range m.names {
		if tn.typeURL == string(t) {
			return tn.names
		}
	}
	return nil
}

// remember keeps names as the last of typeURL's. Clipped: a request that
// appends to the names it is given copies them first.
func (m *nodeMemo) remember(typeURL string, names []string) {
	names = slices.Clip(names)
	for i := range m.names {
		if m.names[i].typeURL == typeURL {
			m.names[i].names = names
			return
		}
	}
	if names == nil {
		return
	}
	if len(m.names) == maxMemoTypes { // the oldest goes, in place
		copy(m.names, m.names[1:])
		m.names[len(m.names)-1] = typeNames{typeURL: typeURL, names: names}
		return
	}
	m.names = append(m.names, typeNames{typeURL: typeURL, names: names})
}

// memoRequest is what the servers' streams read a request into: the
// codec (Codec.Unmarshal) decodes the bytes into into, through
// memo.
type memoRequest struct {
	memo *nodeMemo
	into proto.Message
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

// RequestNode is the node a discovery request carries, nil if none (or
// if m is no discovery request).
func RequestNode(m any) *corev3.Node {
	if _, slot := nodeSlot(m); slot != nil {
		return *slot
	}
	return nil
}

// SetNode gives a discovery request node (nothing for other messages).
func SetNode(m any, node *corev3.Node) {
	if _, slot := nodeSlot(m); slot != nil {
		*slot = node
	}
}

// decode decodes b into into as proto.Unmarshal would, except that a
// node with the bytes of the memo's is the memo's node, SotW resource
// names with the bytes of the memo's are the memo's slice, and a node it
// decodes has no extensions.
func (m *nodeMemo) decode(b []byte, into proto.Message) error {
	num, _ := nodeSlot(into)
	_, sotw := into.(*discoveryv3.DiscoveryRequest)
	sc, ok := scanRequest(b, num, sotw, m)
	var sum uint64
	if sc.nodes == 1 {
		sum = nodeSum(b[sc.nodeStart:sc.nodeEnd])
	}
	sameNode := ok && sc.nodes == 1 && m.node != nil && sc.nodeEnd-sc.nodeStart == m.size && sum == m.sum
	sameNames := ok && sotw && sc.sameNames
	if err := sc.unmarshal(b, into, sameNode, sameNames); err != nil {
		return err
	}
	if sameNode {
		SetNode(into, m.node)
	} else if node := RequestNode(into); node != nil {
		nodeDecodes.Add(1)
		trimNode(node)
		switch sc.nodes {
		case 1:
			m.sum, m.size, m.node = sum, sc.nodeEnd-sc.nodeStart, node
		default: // merged from several fields: not worth remembering
			m.sum, m.size, m.node = 0, 0, nil
		}
	}
	if sotw {
		r := into.(*discoveryv3.DiscoveryRequest)
		if sameNames {
			r.ResourceNames = sc.prev
		} else {
			m.remember(r.GetTypeUrl(), r.ResourceNames)
		}
	}
	return nil
}

// requestScan is where a request's node is in its bytes, and whether its
// SotW names are those the memo holds for its type.
type requestScan struct {
	// knownType is the request's type URL when it names one of the
	// types the bridge serves, in its one type field at typeStart: the
	// decode gives it the constant rather than a string of its own (every
	// request, ACKs included, carries a 50-byte type URL).
	knownType string
	typeStart int
	// smallNonce is the request's nonce when it is one of the first
	// hundred a stream is sent (every ACK of a connect: the servers
	// number responses from 1), in its one nonce field at nonceStart:
	// given as strconv's constant, not a string decoded for it.
	smallNonce                string
	nonceStart                int
	nodeStart, nodeEnd, nodes int
	// sameNames: the names (field 3) are, in order, prev, the memo's for
	// the request's type (field 4).
	sameNames bool
	prev      []string
	// runStart and runEnd bound the names when they are one run of
	// length-delimited field 3 entries (as every encoder writes a
	// repeated string), runs the count of such runs.
	runStart, runEnd, runs int
}

// typeField is the type URL's field number in a discovery request.
func typeField(sotw bool) protowire.Number {
	if sotw {
		return 4
	}
	return 2
}

// requestNonceField is the response nonce's field number in a discovery request.
func requestNonceField(sotw bool) protowire.Number {
	if sotw {
		return 5
	}
	return 6
}

// smallNonce is strconv's constant for a decimal from 1 to 99 written as
// strconv writes it, "" for anything else.
func smallNonce(v []byte) string {
	switch {
	case len(v) == 1 && v[0] >= '1' && v[0] <= '9':
		return strconv.Itoa(int(v[0] - '0'))
	case len(v) == 2 && v[0] >= '1' && v[0] <= '9' && v[1] >= '0' && v[1] <= '9':
		return strconv.Itoa(int(v[0]-'0')*10 + int(v[1]-'0'))
	}
	return ""
}

// knownTypes are the type URLs a request is given as constants.
var knownTypes = []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType,
	resourcev3.SecretType, resourcev3.RuntimeType, resourcev3.ScopedRouteType, resourcev3.VirtualHostType, resourcev3.ExtensionConfigType}

// knownType is the constant of knownTypes with t's bytes, "" for none.
func knownType(t []byte) string {
	for _, k := range knownTypes {
		if string(t) == k {
			return k
		}
	}
	return ""
}

// nameRun reads the run of length-delimited field 3 entries (tag 0x1a)
// at off: where it ends and how many it holds; end < 0 if an entry does
// not parse. A loop over bytes, not fields: a SotW ACK repeats every name
// the stream follows, and parsing each as a field, three times over,
// was most of decoding one (50 names: ~4 µs).
func nameRun(b []byte, off int) (end, count int) {
	for off < len(b) && b[off] == 0x1a {
		l, n := protowire.ConsumeVarint(b[off+1:])
		if n < 0 || l > uint64(len(b)-off-1-n) {
			return -1, 0
		}
		off += 1 + n + int(l)
		count++
	}
	return off, count
}

// sameRun reports whether the run of names in b[start:end] is names, in
// order (compared in full).
func sameRun(b []byte, start, end int, names []string) bool {
	i := 0
	for off := start; off < end; i++ {
		l, n := protowire.ConsumeVarint(b[off+1:])
		v := b[off+1+n : off+1+n+int(l)]
		if i >= len(names) || string(v) != names[i] {
			return false
		}
		off += 1 + n + int(l)
	}
	return i == len(names)
}

// nextField parses the field of b at off: its number, wire type, where
// its value starts and where it ends; end < 0 if b does not parse there
// (proto.Unmarshal then reports why).
func nextField(b []byte, off int) (n protowire.Number, typ protowire.Type, value, end int) {
	n, typ, tagLen := protowire.ConsumeTag(b[off:])
	if tagLen < 0 {
		return 0, 0, 0, -1
	}
	valLen := protowire.ConsumeFieldValue(n, typ, b[off+tagLen:])
	if valLen < 0 {
		return 0, 0, 0, -1
	}
	return n, typ, off + tagLen, off + tagLen + valLen
}

// scanRequest finds the node field num in b (tag and length included)
// and, for SotW, compares the resource names with those memo holds for
// the request's type. It allocates nothing: a SotW ACK carries every name
// the stream follows. Plain loops, no closures: this runs on every
// stream's reading goroutine, whose stack is per proxy.
func scanRequest(b []byte, num protowire.Number, sotw bool, memo *nodeMemo) (sc requestScan, ok bool) {
	var typeURL []byte
	types, names, nonces := 0, 0, 0
	wellFormed := true // every name and the type are length-delimited
	for off := 0; off < len(b); {
		n, typ, value, end := nextField(b, off)
		if end < 0 {
			return requestScan{}, false
		}
		switch {
		case n == num && typ == protowire.BytesType:
			sc.nodeStart, sc.nodeEnd = off, end
			sc.nodes++
		case sotw && n == 3 && typ == protowire.BytesType:
			runEnd, count := nameRun(b, off)
			switch {
			case runEnd < 0:
				return requestScan{}, false
			case count == 0:
				// A tag longer than it need be: not a run (compared
				// field by field below).
				names++
				sc.runs += 2
			default:
				sc.runStart, sc.runEnd = off, runEnd
				sc.runs++
				names += count
				end = runEnd
			}
		case sotw && n == 3:
			wellFormed = false
			names++
		case n == typeField(sotw):
			wellFormed = wellFormed && typ == protowire.BytesType
			typeURL = b[value:end]
			sc.typeStart = off
			types++
		case n == requestNonceField(sotw):
			nonces++
			if v, l := protowire.ConsumeBytes(b[value:end]); typ == protowire.BytesType && l == end-value {
				sc.nonceStart, sc.smallNonce = off, smallNonce(v)
			}
		}
		off = end
	}
	if nonces != 1 {
		sc.smallNonce = ""
	}
	if types == 1 && wellFormed {
		if t, l := protowire.ConsumeBytes(typeURL); l == len(typeURL) {
			sc.knownType = knownType(t)
		}
	}
	if !sotw || memo == nil || !wellFormed || types > 1 || names == 0 {
		return sc, true
	}
	t, _ := protowire.ConsumeBytes(typeURL) // nil when there is no type field
	prev := memo.namesOf(t)
	if len(prev) != names {
		return sc, true
	}
	if sc.runs == 1 {
		if sameRun(b, sc.runStart, sc.runEnd, prev) {
			sc.sameNames, sc.prev = true, prev
		}
		return sc, true
	}
	i := 0
	for off := 0; off < len(b); {
		n, _, value, end := nextField(b, off)
		if n == 3 {
			name, l := protowire.ConsumeBytes(b[value:end])
			if l < 0 || string(name) != prev[i] {
				return sc, true
			}
			i++
		}
		off = end
	}
	sc.sameNames, sc.prev = true, prev
	return sc, true
}

// unmarshal is proto.Unmarshal of b, less the node field when node and
// the names when names: the fields between those are merged in turn,
// which protobuf defines to be the same as decoding them at once.
func (sc *requestScan) unmarshal(b []byte, into proto.Message, node, names bool) error {
	known, small := sc.knownType != "", sc.smallNonce != ""
	if !node && !names && !known && !small {
		return proto.Unmarshal(b, into)
	}
	proto.Reset(into)
	at := 0
	for off := 0; off < len(b); {
		if names && sc.runs == 1 && off == sc.runStart {
			// The names in one run: skipped at once.
			if off > at {
				if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(b[at:off], into); err != nil {
					return err
				}
			}
			off, at = sc.runEnd, sc.runEnd
			continue
		}
		n, _, _, end := nextField(b, off)
		if (node && off == sc.nodeStart) || (names && n == 3) || (known && off == sc.typeStart) || (small && off == sc.nonceStart) {
			if off > at {
				if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(b[at:off], into); err != nil {
					return err
				}
			}
			at = end
		}
		off = end
	}
	if at < len(b) {
		if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(b[at:], into); err != nil {
			return err
		}
	}
	if known || small {
		setConstants(into, sc.knownType, sc.smallNonce)
	}
	return nil
}

// setConstants gives a request the type URL and nonce that are not "".
func setConstants(m proto.Message, typ, nonce string) {
	switch r := m.(type) {
	case *discoveryv3.DeltaDiscoveryRequest:
		if typ != "" {
			r.TypeUrl = typ
		}
		if nonce != "" {
			r.ResponseNonce = nonce
		}
	case *discoveryv3.DiscoveryRequest:
		if typ != "" {
			r.TypeUrl = typ
		}
		if nonce != "" {
			r.ResponseNonce = nonce
		}
	}
}

// Unmarshal decodes a memoRequest through its stream's memo, anything
// else as gRPC's proto codec does.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
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
		if _, slot := nodeSlot(pm); slot != nil {
			s.req = memoRequest{memo: &s.memo, into: pm}
			err := s.ServerStream.RecvMsg(&s.req)
			s.req.into = nil // not kept past the read
			return err
		}
	}
	return s.ServerStream.RecvMsg(m)
}

// NodeMemoInterceptor is the first of the server's interceptors, so
// every later one reads requests through the memo.
func NodeMemoInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info == nil || strings.Contains(info.FullMethod, "Delta") {
		return handler(srv, &memoStream{ServerStream: ss})
	}
	// A SotW stream's memo keeps names by type: those of its first two
	// types that name any in the same object, not an array apart in the
	// size class of the responses every push makes (bench/README.md,
	// "Where a storm's memory stays"). An Envoy's ADS names resources of
	// two types, endpoints and routes (clusters and listeners are
	// wildcards); a stream naming more grows an array of its own.
	s := &sotwMemoStream{memoStream: memoStream{ServerStream: ss}}
	s.memo.names = s.names[:0]
	return handler(srv, &s.memoStream)
}

// sotwMemoStream is a SotW stream's memoStream, with room for the names
// of two types (176 bytes).
type sotwMemoStream struct {
	memoStream
	names [2]typeNames
}
