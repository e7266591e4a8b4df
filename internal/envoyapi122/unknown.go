// Package envoyapi122 checks what the bridge serves against the Envoy API
// of the oldest Envoy it supports, 1.22, with a schema we did not write:
// the generated Go types of go-control-plane v0.10.2-0.20220325020618-
// 49ff273808a1, the version Consul 1.15.4 was built with (`go version -m
// consul` lists it), cut from Envoy's API just before Envoy 1.22.0, the
// oldest Envoy Consul 1.15 supports.
//
// It is a module of its own because that go-control-plane cannot share a
// build with the bridge's (one module path, one version per build, and
// both register the same proto names). So the bridge's tests write what
// it serves a node claiming Envoy 1.22 to testdata/served/ (package xds,
// envoy122_fixture_test.go, -update rewrites them), and this module's
// test decodes those bytes with the old types: a field 1.22 does not
// know decodes as a protobuf unknown field, a typed_config naming a type
// 1.22 does not have does not resolve, and an enum number it does not
// declare stands out.
package envoyapi122

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
)

// Problems lists everything in m (a decoded message) that the old API
// does not know, each prefixed with its field path from at.
func Problems(m protoreflect.Message, at string) []string {
	var out []string
	if u := m.GetUnknown(); len(u) > 0 {
		out = append(out, fmt.Sprintf("%s: unknown field(s) %v of %s", at, fieldNumbers(u), m.Descriptor().FullName()))
	}
	if a, ok := m.Interface().(*anypb.Any); ok {
		return append(out, anyProblems(a, at)...)
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := at + "." + string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				out = append(out, valueProblems(fd, l.Get(i), fmt.Sprintf("%s[%d]", p, i))...)
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				out = append(out, valueProblems(fd.MapValue(), mv, fmt.Sprintf("%s[%v]", p, k))...)
				return true
			})
		default:
			out = append(out, valueProblems(fd, v, p)...)
		}
		return true
	})
	return out
}

func valueProblems(fd protoreflect.FieldDescriptor, v protoreflect.Value, at string) []string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return Problems(v.Message(), at)
	case protoreflect.EnumKind:
		if fd.Enum().Values().ByNumber(v.Enum()) == nil {
			return []string{fmt.Sprintf("%s: enum %s has no value %d", at, fd.Enum().FullName(), v.Enum())}
		}
	}
	return nil
}

// anyProblems decodes a typed config with the old API's types: a type
// it does not have is a problem of its own.
func anyProblems(a *anypb.Any, at string) []string {
	name := a.GetTypeUrl()[strings.LastIndex(a.GetTypeUrl(), "/")+1:]
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
	if err != nil {
		return []string{fmt.Sprintf("%s: type %s is not in the API", at, name)}
	}
	m := mt.New()
	if err := proto.Unmarshal(a.GetValue(), m.Interface()); err != nil {
		return []string{fmt.Sprintf("%s: %s: %v", at, name, err)}
	}
	return Problems(m, at+"<"+name+">")
}

// fieldNumbers are the field numbers in unknown bytes.
func fieldNumbers(b []byte) []protoreflect.FieldNumber {
	var out []protoreflect.FieldNumber
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		out = append(out, num)
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			break
		}
		b = b[n+m:]
	}
	return out
}
