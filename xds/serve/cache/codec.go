package cache

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec wrapped here
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Encode once per version (issue 19).
//
// A health flip sends the same ClusterLoadAssignment, at the same version,
// to every proxy whose group reaches the cluster: thousands of responses
// that differ only in their nonce (the servers number responses per
// stream). The cache hands every stream whose response has the same
// resources at the same version one shared resource slice (sharedSotw,
// sharedDelta, memoised per type set under the cache lock); the response's
// fields before the nonce are encoded once, the first time a stream sends
// it, and the codec sends those bytes followed by the stream's own nonce.
// Protobuf encodes fields in number order and the shared part is fields
// 1 (version), 2 (resources) and 4 (type URL), everything after is the
// stream's (nonce, removed names, ...), so the bytes are exactly what
// proto.Marshal gives (TestSharedEncodingIsProtoEncoding).
//
// The encoded prefix rides in a hidden element just past the end of the
// shared slice (its capacity is one more than its length): only a message
// whose Resources is that very slice can reach it, so a stream whose view
// differs (another group, other names) has its own slice and is encoded on
// its own, and a response the cache did not build is encoded as usual.
// The hidden element also names the version and type URL it was encoded
// with, and the codec checks them against the message.

// sharedMarker starts the hidden element's type URL (sotw) or name (delta).
const sharedMarker = "\x00consul-xds-bridge/encoded\x00"

// shareKey names a response of a set: SotW or delta, and the names it
// carries (and, for delta, removes).
type shareKey struct {
	delta bool
	names string
}

// maxSharedResponses bounds the responses a set remembers, and
// maxSharedBytes the bytes their encodings hold: streams with unusual
// views (SotW clients subscribed to subsets of a large set, each its own)
// beyond that are encoded on their own, as before, rather than the memo
// growing to many copies of the set.
const maxSharedResponses = 64

func (ts *Set) maxSharedBytes() int { return 4*ts.bytes + 64<<10 }

// sharedFor returns the memo under key for entries, calling build to make
// it if there is room; nil if there is none.
func (ts *Set) sharedFor(key shareKey, entries []*Entry, build func() any) any {
	if v, ok := ts.shared[key]; ok {
		return v
	}
	size := 0
	for _, e := range entries {
		size += len(e.any.GetValue())
	}
	if len(ts.shared) >= maxSharedResponses || ts.sharedBytes+size > ts.maxSharedBytes() {
		return nil
	}
	if ts.shared == nil {
		ts.shared = map[shareKey]any{}
	}
	v := build()
	ts.shared[key] = v
	ts.sharedBytes += size
	return v
}

// namesKey is the names of a response: the one name of a single change
// (no allocation: the common fan-out), else every name, each as a kind
// byte (0 sent, 1 removed), its length and itself: no two lists share a
// key, and a list's key holds a NUL, which neither a resource name nor a
// name a client may use holds (ClientName), so it is never a single name.
func namesKey(entries []*Entry, removed []string) string {
	if len(entries) == 1 && len(removed) == 0 {
		return entries[0].name
	}
	var b []byte
	for _, e := range entries {
		b = append(b, 0)
		b = binary.AppendUvarint(b, uint64(len(e.name)))
		b = append(b, e.name...)
	}
	for _, name := range removed {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
	}
	return string(b)
}

// newSotwResponse is a SotW response of entries from ts, sharing its
// encoding with every other stream answered the same under key.
func newSotwResponse(req asked, ts *Set, key shareKey, entries []*Entry, returned map[string]string) *SotwResponse {
	r := &SotwResponse{asked: req, set: ts, entries: entries, returned: returned}
	if sh, ok := ts.sharedFor(key, entries, func() any { return newSharedSotw(ts.version, ts.typeURL, entries) }).(*sharedSotw); ok {
		r.shared = sh
	}
	return r
}

// sharedSotw is the resources of a SotW response shared by every stream
// that receives them at one version.
type sharedSotw struct {
	once sync.Once
	anys []*anypb.Any // len(entries), cap +1: the hidden element
}

func newSharedSotw(version, typeURL string, entries []*Entry) *sharedSotw {
	anys := make([]*anypb.Any, len(entries), len(entries)+1)
	for i, e := range entries {
		anys[i] = e.any
	}
	anys = append(anys, &anypb.Any{TypeUrl: sharedMarker + version + "\x00" + typeURL})
	return &sharedSotw{anys: anys[:len(entries)]}
}

// response is the stream's DiscoveryResponse, its prefix encoded once.
func (s *sharedSotw) response(version, typeURL string) *discoveryv3.DiscoveryResponse {
	out := &discoveryv3.DiscoveryResponse{}
	s.fill(version, typeURL, out)
	return out
}

// fill makes out, empty, the stream's DiscoveryResponse.
func (s *sharedSotw) fill(version, typeURL string, out *discoveryv3.DiscoveryResponse) {
	out.VersionInfo, out.Resources, out.TypeUrl = version, s.anys, typeURL
	s.once.Do(func() {
		hidden := s.anys[:len(s.anys)+1][len(s.anys)]
		// Resources are encoded Anys: this cannot fail, and if it did
		// the empty prefix would make the codec encode as usual.
		hidden.Value, _ = proto.MarshalOptions{Deterministic: true}.Marshal(out)
	})
}

// sharedDelta is the resources of a delta response shared by every
// stream that receives them (with the same removed names) at one version.
type sharedDelta struct {
	once sync.Once
	res  []*discoveryv3.Resource
}

func newSharedDelta(version, typeURL string, entries []*Entry) *sharedDelta {
	res := make([]*discoveryv3.Resource, len(entries), len(entries)+1)
	for i, e := range entries {
		res[i] = e.delta
	}
	res = append(res, &discoveryv3.Resource{Name: sharedMarker + version + "\x00" + typeURL, Resource: &anypb.Any{}})
	return &sharedDelta{res: res[:len(entries)]}
}

func (s *sharedDelta) response(version, typeURL string, removed []string) *discoveryv3.DeltaDiscoveryResponse {
	out := &discoveryv3.DeltaDiscoveryResponse{}
	s.fill(version, typeURL, removed, out)
	return out
}

// fill makes out, empty, the stream's DeltaDiscoveryResponse.
func (s *sharedDelta) fill(version, typeURL string, removed []string, out *discoveryv3.DeltaDiscoveryResponse) {
	s.once.Do(func() {
		hidden := s.res[:len(s.res)+1][len(s.res)]
		prefix := &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: version, Resources: s.res, TypeUrl: typeURL}
		hidden.Resource.Value, _ = proto.MarshalOptions{Deterministic: true}.Marshal(prefix)
	})
	out.SystemVersionInfo, out.Resources, out.TypeUrl, out.RemovedResources = version, s.res, typeURL, removed
}

// hiddenMatches reports whether the hidden element's tag names version
// and typeURL (without building the string).
func hiddenMatches(tag, version, typeURL string) bool {
	n := len(sharedMarker)
	return len(tag) == n+len(version)+1+len(typeURL) &&
		tag[:n] == sharedMarker &&
		tag[n:n+len(version)] == version &&
		tag[n+len(version)] == 0 &&
		tag[n+len(version)+1:] == typeURL
}

// sotwPrefix is the shared encoding of m's fields 1, 2 and 4, nil if m
// does not carry one (or carries a field in between: canary).
// sotwPrefix is the shared encoding m carries, if it does: the hidden
// element's bytes, as a buffer that points at them (the element is never
// written once encoded), so sending it boxes nothing.
func sotwPrefix(m *discoveryv3.DiscoveryResponse) *mem.SliceBuffer {
	r := m.GetResources()
	if cap(r) <= len(r) || m.GetCanary() {
		return nil
	}
	hidden := r[:len(r)+1][len(r)]
	if hidden == nil || len(hidden.GetValue()) == 0 || !hiddenMatches(hidden.GetTypeUrl(), m.GetVersionInfo(), m.GetTypeUrl()) {
		return nil
	}
	return (*mem.SliceBuffer)(&hidden.Value)
}

func deltaPrefix(m *discoveryv3.DeltaDiscoveryResponse) *mem.SliceBuffer {
	r := m.GetResources()
	if cap(r) <= len(r) {
		return nil
	}
	hidden := r[:len(r)+1][len(r)]
	if hidden == nil || hidden.GetResource() == nil || len(hidden.GetResource().GetValue()) == 0 ||
		!hiddenMatches(hidden.GetName(), m.GetSystemVersionInfo(), m.GetTypeUrl()) {
		return nil
	}
	return (*mem.SliceBuffer)(&hidden.Resource.Value)
}

// pushEncoding is one stream's encoding of a shared push: the buffers
// gRPC writes (the shared prefix and the stream's own tail) and the tail,
// a nonce, in one allocation. Built as a slice of boxed SliceBuffers it
// was four small objects per push to every proxy (bench/README.md,
// "Where a storm's memory stays").
type pushEncoding struct {
	bufs [2]mem.Buffer
	tail mem.SliceBuffer
	b    [2 + maxNonceLen]byte
}

// maxNonceLen is the longest nonce pushEncoding holds: a decimal int64
// (the servers' nonces); a longer one is encoded apart.
const maxNonceLen = 20

// sharedSends counts responses sent from a shared encoding.
var sharedSends atomic.Int64

// SharedSends is how many responses this process sent from a shared
// encoding: what the servers' tests read to see that a fan-out shares.
func SharedSends() int64 { return sharedSends.Load() }

// Codec is gRPC's proto codec, except that a response carrying a
// shared prefix is sent as that prefix plus its own remaining fields.
type Codec struct{ encoding.CodecV2 }

// NewCodec is the codec, to be forced on the gRPC server
// (grpc.ForceServerCodecV2) whose streams send the cache's answers.
func NewCodec() Codec { return Codec{encoding.GetCodecV2("proto")} }

// nonceField is the nonce's field number in DiscoveryResponse and in
// DeltaDiscoveryResponse alike (TestNonceField).
const nonceField protowire.Number = 5

// Marshal encodes v as proto.Marshal would, from its shared prefix when
// it carries one.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	var prefix *mem.SliceBuffer
	var nonce string
	// rest is the stream's fields besides the prefix when there is more
	// than the nonce; nil for the common push, whose nonce is encoded by
	// hand as proto.Marshal would, without building and marshalling a
	// message for it (BenchmarkEncodeResponse: ~0.2 µs and 160 B less
	// per push).
	var rest proto.Message
	switch m := v.(type) {
	case *discoveryv3.DiscoveryResponse:
		if prefix = sotwPrefix(m); prefix != nil {
			nonce = m.GetNonce()
			if m.GetControlPlane() != nil || len(m.GetResourceErrors()) > 0 {
				rest = &discoveryv3.DiscoveryResponse{Nonce: nonce, ControlPlane: m.GetControlPlane(), ResourceErrors: m.GetResourceErrors()}
			}
		}
	case *discoveryv3.DeltaDiscoveryResponse:
		if prefix = deltaPrefix(m); prefix != nil {
			nonce = m.GetNonce()
			if len(m.GetRemovedResources()) > 0 || len(m.GetRemovedResourceNames()) > 0 || m.GetControlPlane() != nil || len(m.GetResourceErrors()) > 0 {
				rest = &discoveryv3.DeltaDiscoveryResponse{Nonce: nonce, RemovedResources: m.GetRemovedResources(),
					RemovedResourceNames: m.GetRemovedResourceNames(), ControlPlane: m.GetControlPlane(), ResourceErrors: m.GetResourceErrors()}
			}
		}
	}
	if prefix == nil || len(v.(proto.Message).ProtoReflect().GetUnknown()) > 0 {
		return c.CodecV2.Marshal(v)
	}
	if rest == nil && len(nonce) <= maxNonceLen {
		sharedSends.Add(1)
		e := &pushEncoding{}
		e.bufs[0] = prefix
		if nonce == "" { // proto3 encodes an empty string as nothing
			return e.bufs[:1], nil
		}
		e.tail = protowire.AppendString(protowire.AppendTag(e.b[:0], nonceField, protowire.BytesType), nonce)
		e.bufs[1] = &e.tail
		return e.bufs[:], nil
	}
	var tail []byte
	switch {
	case rest != nil:
		var err error
		if tail, err = (proto.MarshalOptions{Deterministic: true}).Marshal(rest); err != nil {
			return nil, err
		}
	case nonce != "": // proto3 encodes an empty string as nothing
		tail = protowire.AppendString(protowire.AppendTag(make([]byte, 0, 2+len(nonce)), nonceField, protowire.BytesType), nonce)
	}
	sharedSends.Add(1)
	// SliceBuffers are not pooled: gRPC's Free after the write leaves the
	// shared prefix alone.
	return mem.BufferSlice{prefix, mem.SliceBuffer(tail)}, nil
}
