package xds

import (
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// TestRBACBuiltOncePerDestination: sidecars of one service carry copies
// of the same resolved intentions and share one RBAC per translation;
// another destination's rules, even equal ones, and another default get
// their own.
func TestRBACBuiltOncePerDestination(t *testing.T) {
	api := ir.Intentions{Default: ir.IntentionDeny, Rules: []ir.IntentionRule{{Source: "web", Action: ir.IntentionAllow}}}
	copyA, copyB := api, api // two sidecar instances of api
	other := ir.Intentions{Default: ir.IntentionDeny, Rules: []ir.IntentionRule{{Source: "web", Action: ir.IntentionAllow}}}
	m := rbacMemo{}
	fa, err := m.httpFilter(copyA)
	if err != nil {
		t.Fatal(err)
	}
	fb, _ := m.httpFilter(copyB)
	if fa != fb {
		t.Error("two instances of one destination got two HTTP RBAC filters")
	}
	if fo, _ := m.httpFilter(other); fo == fa {
		t.Error("another destination's intentions shared the first one's filter")
	}
	na, _ := m.network(copyA)
	if nb, _ := m.network(copyB); na != nb || na == nil {
		t.Error("network RBAC not shared between instances of one destination")
	}
	allow := api
	allow.Default = ir.IntentionAllow
	if fd, _ := m.httpFilter(allow); fd == fa {
		t.Error("another default shared the filter")
	}
	bad := ir.Intentions{Default: "maybe"}
	if _, err := m.httpFilter(bad); err == nil {
		t.Error("an invalid default built an RBAC")
	}
	if _, err := m.httpFilter(bad); err == nil {
		t.Error("the memo forgot the error")
	}
}
