package model

import (
	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// resolveIntentions is a stand-in for package intention (issue18a):
// exact sources above the wildcard, L4 actions only.
// TODO(issue18a merge): intention.Resolve(intention.FromConfigEntry...).
func resolveIntentions(entries []*api.ServiceIntentionsConfigEntry, dest string, def ir.IntentionAction) (ir.Intentions, error) {
	out := ir.Intentions{Default: def}
	var wild []ir.IntentionRule
	for _, e := range entries {
		if e.Name != dest && e.Name != "*" {
			continue
		}
		for _, s := range e.Sources {
			r := ir.IntentionRule{Source: s.Name, Action: ir.IntentionAction(s.Action)}
			if s.Name == "*" || e.Name == "*" {
				wild = append(wild, r)
			} else {
				out.Rules = append(out.Rules, r)
			}
		}
	}
	out.Rules = append(out.Rules, wild...)
	return out, nil
}
