package serve

import (
	"fmt"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
)

// Limits on what a relay stream may report of the Envoys behind it: the
// metadata comes from the agent and is only shown, so it is cut rather
// than trusted (a VM runs a handful of Envoys per node.cluster).
const (
	maxRelayedEnvoys     = 32
	maxRelayedEnvoyBytes = 160
)

// relayedEnvoys is what a relay stream's node reports of the Envoys it
// relays to (xds.RelayedEnvoysMetadata), bounded: at most
// maxRelayedEnvoys entries of at most maxRelayedEnvoyBytes, then a count
// of the rest.
func relayedEnvoys(n *corev3.Node) []string {
	v := n.GetMetadata().GetFields()[xds.RelayedEnvoysMetadata].GetStringValue()
	if v == "" {
		return nil
	}
	var out []string
	entries := strings.FieldsFunc(v, func(r rune) bool { return r == ',' })
	for i, e := range entries {
		if i == maxRelayedEnvoys {
			out = append(out, fmt.Sprintf("(%d more)", len(entries)-i))
			break
		}
		if len(e) > maxRelayedEnvoyBytes {
			e = e[:maxRelayedEnvoyBytes] + "…"
		}
		out = append(out, strings.ToValidUTF8(e, "?"))
	}
	return out
}

// EnvoysOf lists the Envoys connected under node.cluster key (whatever
// their version class), as "NODE-ID@VERSION", sorted: what a relay
// reports upstream. Nodes that announce no Envoy version are left out.
func (s *Server) EnvoysOf(key string) []string {
	out := s.tracker.envoysOf(key)
	slices.Sort(out)
	return slices.Compact(out)
}

// envoysOf is EnvoysOf's unsorted list, read under the lock without the
// statuses snapshot builds for every stream: each relay asks every 2 s,
// and building them was 5 % of the load generator's CPU with 1,980
// agents (bench/README.md, "The tier at 19,800, one connection each").
func (t *tracker) envoysOf(key string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, st := range t.streams {
		if st.node == nil || cache.BaseKey(cache.Key(st.node)) != key {
			continue
		}
		if v := envoyVersion(st.node); v != "" {
			out = append(out, st.node.GetId()+"@"+v)
		}
	}
	return out
}
