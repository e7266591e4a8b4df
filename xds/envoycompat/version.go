// Package envoycompat serves each Envoy what its version understands.
//
// The translator (package xds) writes one world in the newest API the
// bridge is built with (go-control-plane envoy/v1.40). An older Envoy
// ignores the fields it does not know, or rejects the whole resource
// when a typed_config names a type it lacks or a filter that takes no
// per-route config gets one. So package serve keys every Envoy below
// the newest feature threshold by its version class (Class), and serves
// it rewritten copies of the translated resources: the older equivalent
// of a feature where one exists, or the resource without the feature and
// a note saying what was left out. Copies are made per class and per
// translation, never per proxy, and a resource that needs no change is
// shared as it is; the translated protos are never modified.
//
// Supported: Envoy 1.22 (Oldest) to 1.40 (Newest). A node announcing no
// version, or one at or above the last threshold (features.go), gets the
// translation unchanged; one below 1.22 is served as 1.22 with a note.
package envoycompat

import (
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// Version is an Envoy release, major.minor (patches add no API).
type Version struct{ Major, Minor uint32 }

var (
	// Oldest is the oldest Envoy the bridge supports: the oldest Consul
	// 1.15 supports, whose API internal/envoyapi122 checks every served
	// resource against.
	Oldest = Version{1, 22}
	// Newest is the newest Envoy the bridge supports: the API of the
	// go-control-plane it is built with (go.mod: envoy v1.40.0).
	Newest = Version{1, 40}
)

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	return v.Major < w.Major || v.Major == w.Major && v.Minor < w.Minor
}

// FromNode is the Envoy version a node announces: its
// user_agent_build_version, else its user_agent_version parsed
// ("1.22.3", "v1.22.3-dev"). ok is false for a node that announces
// none, or a proxyless gRPC client (whose version is gRPC's).
func FromNode(n *corev3.Node) (v Version, ok bool) {
	if ua := n.GetUserAgentName(); ua != "" && ua != "envoy" {
		return Version{}, false
	}
	if bv := n.GetUserAgentBuildVersion().GetVersion(); bv != nil {
		if bv.GetMajorNumber() == 0 && bv.GetMinorNumber() == 0 {
			return Version{}, false
		}
		return Version{bv.GetMajorNumber(), bv.GetMinorNumber()}, true
	}
	return Parse(n.GetUserAgentVersion())
}

// Parse reads "major.minor" from the front of s, after an optional "v".
func Parse(s string) (Version, bool) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	maj, rest, ok := strings.Cut(s, ".")
	if !ok {
		return Version{}, false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	a, err1 := strconv.ParseUint(maj, 10, 32)
	b, err2 := strconv.ParseUint(rest[:end], 10, 32)
	if err1 != nil || err2 != nil || a == 0 && b == 0 {
		return Version{}, false
	}
	return Version{uint32(a), uint32(b)}, true
}

// Class is the set of features an Envoy version has, named by the
// oldest version with exactly that set (features.go). Envoys of one
// class are served one rewritten copy. The zero Class has every
// feature: the translation is served as it is.
type Class struct{ min Version }

// ClassOf is the class of an Envoy of version v.
func ClassOf(v Version) Class {
	if !v.Less(lastThreshold()) {
		return Class{}
	}
	c := Oldest
	for _, f := range features {
		if !v.Less(f.since) && c.Less(f.since) {
			c = f.since
		}
	}
	return Class{c}
}

// ClassOfNode is the class a node is served as; the zero Class for a
// node that announces no Envoy version.
func ClassOfNode(n *corev3.Node) Class {
	v, ok := FromNode(n)
	if !ok {
		return Class{}
	}
	return ClassOf(v)
}

// Current reports whether c has every feature (no rewrite).
func (c Class) Current() bool { return c == Class{} }

// String names the class by its oldest version ("1.22"); "" for the
// current class. It is what cache keys carry.
func (c Class) String() string {
	if c.Current() {
		return ""
	}
	return c.min.String()
}

// ParseClass is the Class a String came from; the current class for
// anything else.
func ParseClass(s string) Class {
	v, ok := Parse(s)
	if !ok {
		return Class{}
	}
	return ClassOf(v)
}

// has reports whether Envoys of class c have feature f.
func (c Class) has(f feature) bool { return c.Current() || !c.min.Less(features[f].since) }
