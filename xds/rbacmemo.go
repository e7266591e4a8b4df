package xds

import (
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// rbacMemo builds each destination's RBAC once per translation. The model
// resolves intentions once per destination (model/intentions.go) and every
// sidecar and Connect-native instance of that service carries the same
// rules (one backing slice), so without it a change of intentions built,
// checked (regular expressions included) and marshalled the same RBAC once
// per instance. Keyed by the rules' backing array, which is valid only
// within one translation: the memo is made per Translate call.
type rbacMemo map[rbacKey]rbacBuilt

type rbacKey struct {
	rules *ir.IntentionRule // first rule, nil for none
	n     int
	def   ir.IntentionAction
	http  bool
}

type rbacBuilt struct {
	network *anypb.Any        // network RBAC, for TCP public listeners
	filter  *hcmv3.HttpFilter // HTTP RBAC filter; shared read-only by the HCMs using it
	err     error
}

func (m rbacMemo) get(in ir.Intentions, http bool, build func() rbacBuilt) rbacBuilt {
	k := rbacKey{n: len(in.Rules), def: in.Default, http: http}
	if len(in.Rules) > 0 {
		k.rules = &in.Rules[0]
	}
	if b, ok := m[k]; ok {
		return b
	}
	b := build()
	m[k] = b
	return b
}

// network is NetworkRBAC(in), as the Any of a network filter.
func (m rbacMemo) network(in ir.Intentions) (*anypb.Any, error) {
	b := m.get(in, false, func() rbacBuilt {
		rbac, err := NetworkRBAC(in)
		if err != nil {
			return rbacBuilt{err: err}
		}
		return rbacBuilt{network: mustAny(rbac)}
	})
	return b.network, b.err
}

// httpFilter is HTTPRBACFilter(in).
func (m rbacMemo) httpFilter(in ir.Intentions) (*hcmv3.HttpFilter, error) {
	b := m.get(in, true, func() rbacBuilt {
		f, err := HTTPRBACFilter(in)
		return rbacBuilt{filter: f, err: err}
	})
	return b.filter, b.err
}
