package agent

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// The bound on relayed groups (maxKeys) is there because a glob in
// allow_groups lets local processes choose node.cluster strings. It must
// not become a way to lock out the groups that are really used: it counts
// only groups admitted through a pattern, and when it is reached a relay
// no local proxy uses (lingering, or restored from disk and not claimed)
// makes room, the one idle longest first. Only 64 pattern groups with
// connected proxies refuse a 65th, with the reason.

// bounded reports whether k counts against maxKeys: not a sidecar group
// (keyed from a local Consul registration) and not named exactly in
// allow_groups or a connect service's proxy_groups.
func (a *Agent) bounded(k serve.RelayKey) bool {
	if strings.HasPrefix(k.NodeCluster, ir.SidecarGroupPrefix) {
		return false
	}
	if slices.ContainsFunc(a.cfg.AllowGroups, func(p string) bool { return !isPattern(p) && p == k.NodeCluster }) {
		return false
	}
	for _, acc := range a.cfg.Leaf {
		if slices.Contains(acc.ProxyGroups, k.NodeCluster) {
			return false
		}
	}
	return true
}

func isPattern(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// makeRoom admits a key under the bound, dropping an idle relay if it
// must, or says why it cannot.
func (a *Agent) makeRoom(k serve.RelayKey) error {
	if !a.bounded(k) {
		return nil
	}
	a.mu.Lock()
	if a.relays[k.Key] != nil {
		a.mu.Unlock()
		return nil
	}
	var n int
	var victim *relay
	for _, r := range a.relays {
		if !a.bounded(r.key) {
			continue
		}
		n++
		r.mu.Lock()
		idle, since := r.lingering != nil, r.idleSince
		r.mu.Unlock()
		if idle && (victim == nil || since.Before(victim.idleSinceNow())) {
			victim = r
		}
	}
	if n < maxKeys {
		a.mu.Unlock()
		return nil
	}
	if victim == nil {
		a.mu.Unlock()
		return fmt.Errorf("this agent already relays %d node.cluster values matched by allow_groups patterns, each with a connected proxy (its limit); node.cluster %q is refused: list the groups this host uses exactly in allow_groups (they are not counted) or narrow its patterns", maxKeys, k.NodeCluster)
	}
	a.unlinkLocked(victim)
	a.mu.Unlock()
	a.finishDrop(victim, "the relayed group limit was reached; stopped relaying the group idle longest to make room")
	return nil
}

func (r *relay) idleSinceNow() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.idleSince
}
