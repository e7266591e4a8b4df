package policy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Chain is the `chain "SERVICE"` block: Consul's discovery chain for a
// service (its service-router's routes, then a catch-all through its
// service-splitter to the service-resolver's subsets), which the config
// entries translation writes. A proxy listener's route whose target is
// SERVICE (no subset) follows it, as Consul applies the chain wherever a
// service is a target, unless the route says `chain = false`.
type Chain struct {
	Service string
	Routes  []*Route
	Source  string
}

// chainBlock is `chain "SERVICE" { route { ... } }`.
type chainBlock struct {
	Service  string        `hcl:"service,label"`
	Routes   []*routeBlock `hcl:"route,block"`
	DefRange hcl.Range     `hcl:",def_range"`
}

// ChainFor returns the chain block of service, or nil.
func (p *Policy) ChainFor(service string) *Chain {
	if p == nil {
		return nil
	}
	for _, c := range p.Chains {
		if c.Service == service {
			return c
		}
	}
	return nil
}

// chains resolves the chain blocks of every document: one per service,
// each ending in a route without a match (the chain's catch-all).
func (r *resolver) chains(docs []*Document) {
	seen := map[string]hcl.Range{}
	for _, d := range docs {
		for _, b := range d.chains {
			if prev, ok := seen[b.Service]; ok {
				r.add(b.DefRange, "Duplicate chain block",
					"chain %q is already defined at %s; each service's discovery chain may be declared once across all files and KV documents.", b.Service, pos(prev))
				continue
			}
			seen[b.Service] = b.DefRange
			c := &Chain{Service: b.Service, Source: pos(b.DefRange)}
			for _, rb := range b.Routes {
				c.Routes = append(c.Routes, r.route(rb, fmt.Sprintf("route of chain %q", b.Service)))
			}
			if len(b.Routes) == 0 || b.Routes[len(b.Routes)-1].Match != nil {
				r.add(b.DefRange, "Chain without a catch-all",
					"chain %q must end with a route without a match block (where the service's traffic goes when no router route matches), e.g. route { service = %q }.", b.Service, b.Service)
				continue
			}
			r.pol.Chains = append(r.pol.Chains, c)
		}
	}
	slices.SortFunc(r.pol.Chains, func(a, b *Chain) int { return strings.Compare(a.Service, b.Service) })
}

// applyChains makes every proxy listener route that targets a service
// with a chain follow it (see Chain); a route with chain = false, one
// naming a subset, and a route whose targets have no chain are left as
// written. A warning at each route says what applied and which settings
// win, so validate and /v1/policy show it.
func (r *resolver) applyChains(optOut map[*Route]bool) {
	listenerRoute := map[*Route]bool{}
	for _, p := range r.pol.Proxies {
		for _, l := range p.Listeners {
			for _, vh := range l.VirtualHosts {
				var out []*Route
				for _, rt := range vh.Routes {
					listenerRoute[rt] = true
					if optOut[rt] || len(r.pol.Chains) == 0 {
						out = append(out, rt)
						continue
					}
					out = append(out, r.followChain(rt)...)
				}
				vh.Routes = out
			}
		}
	}
	var ignored []*Route
	for rt := range optOut {
		if !listenerRoute[rt] {
			ignored = append(ignored, rt)
		}
	}
	slices.SortFunc(ignored, func(a, b *Route) int {
		return cmp.Or(strings.Compare(a.Range.Filename, b.Range.Filename), cmp.Compare(a.Range.Start.Byte, b.Range.Start.Byte))
	})
	for _, rt := range ignored {
		r.warn(rt.Range, "chain = false ignored",
			"chain = false applies to proxy listener routes only; mesh_routes, grpc_service and chain routes are written as served. Remove it here.")
	}
}

// followChain is rt through the chains of its targets.
func (r *resolver) followChain(rt *Route) []*Route {
	var chained []*Chain
	for _, t := range rt.Targets {
		if c := r.pol.ChainFor(t.Service); c != nil && t.Subset == "" && !slices.Contains(chained, c) {
			chained = append(chained, c)
		}
	}
	if len(chained) == 0 {
		return []*Route{rt}
	}
	var out []*Route
	var skipped []string
	// One target: the chain's router routes come first, each joined
	// with rt's match. A split takes the chain's catch-all only: a
	// router route would have to split the request's other shares too.
	if len(rt.Targets) == 1 {
		c := chained[0]
		for i, cr := range c.Routes[:len(c.Routes)-1] {
			m, ok := joinMatch(rt.Match, cr.Match)
			if !ok {
				skipped = append(skipped, fmt.Sprintf("router route %d (%s)", i, cr.Source))
				continue
			}
			nr := chainRoute(rt, cr)
			nr.Match = m
			out = append(out, nr)
		}
	} else {
		for _, c := range chained {
			if n := len(c.Routes) - 1; n > 0 {
				skipped = append(skipped, fmt.Sprintf("%d router route(s) of %s (a split route takes the chain's split only)", n, c.Service))
			}
		}
	}
	last := *rt
	last.Targets = nil
	// Weights: each chained target's share is divided as its chain's
	// catch-all divides it; the others keep theirs, scaled alike.
	for _, t := range rt.Targets {
		c := r.pol.ChainFor(t.Service)
		if c == nil || t.Subset != "" {
			scale := 1
			for _, o := range chained {
				scale *= sumTargets(o.Routes[len(o.Routes)-1].Targets)
			}
			last.Targets = append(last.Targets, Target{Service: t.Service, Subset: t.Subset, Weight: max(t.Weight, 1) * scale})
			continue
		}
		ct := c.Routes[len(c.Routes)-1]
		scale := 1
		for _, o := range chained {
			if o != c {
				scale *= sumTargets(o.Routes[len(o.Routes)-1].Targets)
			}
		}
		for _, x := range ct.Targets {
			last.Targets = append(last.Targets, Target{Service: x.Service, Subset: x.Subset, Weight: max(t.Weight, 1) * max(x.Weight, 1) * scale})
		}
		fillFromChain(&last, ct)
	}
	// A split's multiplied weights are reduced (9/1/10, not 4500/500/5000);
	// one target's chain keeps the splitter's as written.
	last.Targets = mergeTargets(last.Targets, len(rt.Targets) > 1)
	if len(last.Targets) == 1 {
		last.Targets[0].Weight = 1
	}
	out = append(out, &last)
	names := make([]string, len(chained))
	for i, c := range chained {
		names[i] = fmt.Sprintf("%q (%s)", c.Service, c.Source)
	}
	detail := fmt.Sprintf("this route follows Consul's discovery chain of %s, as Consul's own proxies do: %d route(s) instead of one. Its own timeout, retry, rewrite and header changes win over the chain's, which fill only what it leaves unset. Add chain = false to the route to send to every instance as written.", strings.Join(names, ", "), len(out))
	if len(skipped) > 0 {
		detail += " Not applied here: " + strings.Join(skipped, "; ") + ", whose path or method cannot be joined with this route's match."
	}
	r.warn(rt.Range, "Route follows the discovery chain", "%s", detail)
	return out
}

// chainRoute is rt sending to cr's targets, with cr's settings where rt
// has none.
func chainRoute(rt, cr *Route) *Route {
	nr := *rt
	nr.Targets = slices.Clone(cr.Targets)
	fillFromChain(&nr, cr)
	return &nr
}

func fillFromChain(nr, cr *Route) {
	if nr.Timeout == 0 {
		nr.Timeout = cr.Timeout
	}
	if nr.IdleTimeout == 0 {
		nr.IdleTimeout = cr.IdleTimeout
	}
	if nr.Retry == nil {
		nr.Retry = cr.Retry
	}
	if nr.Rewrite == nil {
		nr.Rewrite = cr.Rewrite
	}
	if emptyMutation(nr.RequestHeaders) {
		nr.RequestHeaders = cr.RequestHeaders
	}
	if emptyMutation(nr.ResponseHeaders) {
		nr.ResponseHeaders = cr.ResponseHeaders
	}
}

func emptyMutation(h ir.HeaderMutation) bool {
	return len(h.Add) == 0 && len(h.Set) == 0 && len(h.Remove) == 0
}

// joinMatch is a match for requests both a and b match, when one can
// say it: paths nest (one is "/" or a prefix of the other), methods agree;
// headers and query parameters add up.
func joinMatch(a, b ir.RouteMatch) (ir.RouteMatch, bool) {
	anyPath := func(m ir.RouteMatch) bool {
		return m.Path == "" && m.PathRegex == "" && (m.PathPrefix == "" || m.PathPrefix == "/")
	}
	m := a
	switch {
	case anyPath(b):
	case anyPath(a):
		m.PathPrefix, m.Path, m.PathRegex, m.CaseSensitive = b.PathPrefix, b.Path, b.PathRegex, b.CaseSensitive
	case a.PathPrefix != "" && a.CaseSensitive && b.CaseSensitive && b.PathRegex == "" && strings.HasPrefix(b.PathPrefix+b.Path, a.PathPrefix):
		m.PathPrefix, m.Path = b.PathPrefix, b.Path
	default:
		return ir.RouteMatch{}, false
	}
	switch {
	case b.Method == "" || b.Method == a.Method:
	case a.Method == "":
		m.Method = b.Method
	default:
		return ir.RouteMatch{}, false
	}
	m.Headers = slices.Concat(a.Headers, b.Headers)
	m.Query = slices.Concat(a.Query, b.Query)
	return m, true
}

func sumTargets(ts []Target) int {
	n := 0
	for _, t := range ts {
		n += max(t.Weight, 1)
	}
	return n
}

// mergeTargets joins targets of the same service and subset and, with
// reduce, divides the weights by their greatest common divisor.
func mergeTargets(ts []Target, reduce bool) []Target {
	var out []Target
	for _, t := range ts {
		i := slices.IndexFunc(out, func(o Target) bool { return o.Service == t.Service && o.Subset == t.Subset })
		if i < 0 {
			out = append(out, t)
			continue
		}
		out[i].Weight += t.Weight
	}
	if !reduce {
		return out
	}
	g := 0
	for _, t := range out {
		g = gcd(g, t.Weight)
	}
	for i := range out {
		if g > 1 {
			out[i].Weight /= g
		}
	}
	return out
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
