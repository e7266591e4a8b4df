package model

import (
	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/intention"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// resolveIntentions is what the service-intentions entries say of callers
// of dest, with Consul's precedence (package intention).
func resolveIntentions(entries []*api.ServiceIntentionsConfigEntry, dest string, def ir.IntentionAction) (ir.Intentions, error) {
	in := make([]intention.Entry, 0, len(entries))
	for _, e := range entries {
		in = append(in, intention.FromConfigEntry(e))
	}
	return intention.Resolve(in, dest, def)
}
