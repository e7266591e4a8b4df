package bench

import (
	"fmt"
	"strings"
)

// The follow-one world (issue 40's own): each proxy follows one routed
// service — proxy k the service k mod U, in a group of its own routing to
// that service only — so a flip of service s reaches the N/U proxies that
// follow s, not the whole fleet. Flips go round the routed services. The
// comparison's other world (every proxy routes to all U services, every
// flip reaches every proxy) is the harder one for the fan-out; this one
// is what a fleet of sidecars that each call one backend looks like.

// followGroup names the proxy group that follows routed service s.
func followGroup(s int) string { return fmt.Sprintf("f%03d", s) }

// FollowOnePolicy is Policy plus one group per routed service, routing to
// that service alone. The "bench" group stays for the baseline, which
// serves every node one group's listeners.
func FollowOnePolicy(exportAll bool, routes int) string {
	var b strings.Builder
	b.WriteString(Policy(exportAll, routes))
	for s := 0; s < routes; s++ {
		fmt.Fprintf(&b, "proxy %q {\n  listener \"http\" {\n    port = 8080\n    virtual_host \"all\" {\n      domains = [\"*\"]\n", followGroup(s))
		fmt.Fprintf(&b, "      route {\n        match {\n          path_prefix = \"/\"\n        }\n        service = %q\n      }\n", ServiceName(s))
		b.WriteString("    }\n  }\n}\n")
	}
	return b.String()
}

// followed is the routed service proxy k follows in the follow-one world.
func (r *run) followed(k int) int { return k % max(r.opts.Upstreams, 1) }

// flipService is the service the k-th flip of a scenario changes: always
// service 0, or in the follow-one world the routed services in turn.
func (r *run) flipService(k int) int {
	if !r.opts.FollowOne {
		return 0
	}
	return k % max(r.opts.Upstreams, 1)
}

// sidecarUpstreams are the upstreams of the peer's sidecar k.
func sidecarUpstreams(k, upstreams int, followOne bool) []int {
	if followOne {
		return []int{k % max(upstreams, 1)}
	}
	out := make([]int, upstreams)
	for u := range out {
		out[u] = u
	}
	return out
}
