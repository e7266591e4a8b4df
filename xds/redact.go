package xds

import (
	"github.com/cncf/xds/go/udpa/annotations"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Redacted is what a sensitive value is replaced with in config dumps,
// as in Envoy's own admin /config_dump.
const Redacted = "[redacted]"

// Redact returns m with every field Envoy's API marks sensitive
// (udpa.annotations.sensitive: private keys, PKCS #12 bundles, generic
// secrets, session ticket keys, ...) replaced by "[redacted]", looking
// inside Any fields (typed_config) too. m itself is never changed: the
// result is a copy when anything was redacted, else m.
func Redact(m proto.Message) proto.Message {
	c := proto.Clone(m)
	if redactMessage(c.ProtoReflect()) {
		return c
	}
	return m
}

// redactMessage redacts m in place and reports whether it changed.
func redactMessage(m protoreflect.Message) bool {
	changed := false
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return false // a type this binary does not know: nothing of ours
		}
		if !redactMessage(inner.ProtoReflect()) {
			return false
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(inner)
		if err != nil {
			// Never hand out the unredacted original.
			a.Value = nil
			return true
		}
		a.Value = b
		return true
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if sensitive(fd) {
			redactField(m, fd)
			changed = true
			return true
		}
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if redactMessage(l.Get(i).Message()) {
					changed = true
				}
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					if redactMessage(mv.Message()) {
						changed = true
					}
					return true
				})
			}
		default:
			if redactMessage(v.Message()) {
				changed = true
			}
		}
		return true
	})
	return changed
}

func sensitive(fd protoreflect.FieldDescriptor) bool {
	opts := fd.Options()
	if opts == nil || !proto.HasExtension(opts, annotations.E_Sensitive) {
		return false
	}
	s, _ := proto.GetExtension(opts, annotations.E_Sensitive).(bool)
	return s
}

// redactField replaces a set sensitive field: a DataSource (how keys are
// given) by the inline string "[redacted]", strings and bytes by
// "[redacted]", and any other message by an empty one.
func redactField(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
	one := func(v protoreflect.Value) protoreflect.Value {
		switch fd.Kind() {
		case protoreflect.StringKind:
			return protoreflect.ValueOfString(Redacted)
		case protoreflect.BytesKind:
			return protoreflect.ValueOfBytes([]byte(Redacted))
		case protoreflect.MessageKind, protoreflect.GroupKind:
			if _, ok := v.Message().Interface().(*corev3.DataSource); ok {
				return protoreflect.ValueOfMessage((&corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: Redacted}}).ProtoReflect())
			}
			return protoreflect.ValueOfMessage(v.Message().Type().New())
		}
		return fd.Default()
	}
	v := m.Get(fd)
	switch {
	case fd.IsList():
		l := m.Mutable(fd).List()
		for i := range l.Len() {
			l.Set(i, one(l.Get(i)))
		}
	case fd.IsMap():
		m.Clear(fd)
	default:
		m.Set(fd, one(v))
	}
}
