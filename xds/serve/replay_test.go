package serve

import (
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestReplayKeepsEveryField: the first request a handler reads back is
// the one read, every field of it (each set here, so a field a newer
// go-control-plane adds and replay does not copy fails this test),
// unknown fields included, the node shared rather than copied; and
// replaying allocates nothing.
func TestReplayKeepsEveryField(t *testing.T) {
	for _, src := range []proto.Message{&discoveryv3.DeltaDiscoveryRequest{}, &discoveryv3.DiscoveryRequest{}} {
		fillEveryField(t, src.ProtoReflect())
		dst := src.ProtoReflect().New().Interface()
		replay(src, dst)
		if !proto.Equal(src, dst) {
			t.Errorf("%T replayed as %v, want %v", src, dst, src)
		}
		if n := src.ProtoReflect().Descriptor().Fields().ByName("node"); dst.ProtoReflect().Get(n).Message().Interface() != src.ProtoReflect().Get(n).Message().Interface() {
			t.Errorf("%T: the node was copied, not shared", src)
		}
		if a := testing.AllocsPerRun(100, func() { replay(src, dst) }); a != 0 {
			t.Errorf("%T: replaying took %v allocations", src, a)
		}
	}
}

// fillEveryField gives each field of m a value that is not its default.
func fillEveryField(t *testing.T, m protoreflect.Message) {
	t.Helper()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			m.Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("v"))
		case fd.IsList() && fd.Kind() == protoreflect.StringKind:
			m.Mutable(fd).List().Append(protoreflect.ValueOfString("name"))
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			l := m.Mutable(fd).List()
			l.Append(l.NewElement())
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString("s-"+string(fd.Name())))
		case fd.Kind() == protoreflect.MessageKind:
			m.Mutable(fd)
		default:
			t.Fatalf("%s: a field of kind %s this test cannot fill", fd.FullName(), fd.Kind())
		}
	}
	m.SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 7))
}
