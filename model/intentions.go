package model

import (
	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/intention"
)

// intentionResolver resolves the service-intentions entries per
// destination once per build: every sidecar (and gRPC server) of a
// service shares its intentions, so the entries are converted once and
// each destination resolved once however many instances it has.
type intentionResolver struct {
	entries []intention.Entry
	def     ir.IntentionAction
	done    map[string]resolved
}

type resolved struct {
	in  ir.Intentions
	err error
}

func newIntentionResolver(entries []*api.ServiceIntentionsConfigEntry, def ir.IntentionAction) *intentionResolver {
	r := &intentionResolver{entries: make([]intention.Entry, 0, len(entries)), def: def, done: map[string]resolved{}}
	for _, e := range entries {
		r.entries = append(r.entries, intention.FromConfigEntry(e))
	}
	return r
}

// resolve is what the entries say of callers of dest, with Consul's
// precedence (package intention).
func (r *intentionResolver) resolve(dest string) (ir.Intentions, error) {
	if d, ok := r.done[dest]; ok {
		return d.in, d.err
	}
	in, err := intention.Resolve(r.entries, dest, r.def)
	r.done[dest] = resolved{in, err}
	return in, err
}
