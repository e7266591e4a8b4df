package tagroute

import (
	"fmt"
	"slices"
	"strings"
)

// Owners says, for one listener, whose tags may route which host. Tags
// are written by whoever registers a service, so without it one team's
// registration could take another's host: a Fabio weight= or redirect=
// joining another service's prefix, a Traefik priority sorting ahead of
// another service's rule, or a host that differs only in case (Envoy
// compares domains case-insensitively and refuses a route configuration
// that repeats one, taking every host of the listener down with it).
//
// The unit owned is a host, compared case-insensitively. Routes without
// a host (any host) are the shared catch-all, so there the unit is the
// host-less path ("" for a rule without one). Who owns a unit:
//
//  1. the services Allowed lists for it (tag_routes owners): any of them
//     may route it, together, and no other service;
//  2. else, if the listener's own virtual hosts serve it (a domain equal
//     to it, or a wildcard domain matching it; "*" for host-less routes),
//     the policy: tags may not add to it;
//  3. else the service, among those whose tags claim it, whose name sorts
//     first: a rule every replica computes alike from the catalog alone.
//
// Every claim refused is a warning naming the service, its tag, the unit
// and its owner.
type Owners struct {
	// Domains are the domains of the listener's own virtual hosts.
	Domains []string
	// Allowed maps a host, "*" (every host-less route) or "/PATH" (the
	// host-less routes of exactly that path) to the services whose tags
	// may route it. Hosts are compared case-insensitively.
	Allowed map[string][]string
}

// claim is one service's bid for a unit, from one tag.
type claim struct {
	service, tag string
	host, path   string // host lower-cased, "" for any host
}

// claimHost is a tag's host as owners and the routes compare it:
// lower-cased, as Envoy matches hosts, and "" for "*". Envoy serves the
// domain "*" to any host, so a tag host of "*" is a host-less route and
// must meet the host-less rules: kept as a named host it would skip the
// policy's catch-all and the owners of host-less paths, and join the
// catch-all virtual host all the same.
func claimHost(host string) string {
	if host = strings.ToLower(host); host == "*" {
		return ""
	}
	return host
}

// unit is what a claim bids for: its host, or for a host-less route its path.
func (c claim) unit() string {
	if c.host != "" {
		return c.host
	}
	return "*" + c.path
}

// describe names a unit in a warning.
func describeUnit(c claim) string {
	if c.host != "" {
		return fmt.Sprintf("host %q", c.host)
	}
	if c.path == "" {
		return "routes without host or path"
	}
	return fmt.Sprintf("path %q on any host", c.path)
}

// admit decides, per unit, which claims stand: the returned function
// reports whether a claim may be served; warnings name the refused ones.
func (o Owners) admit(claims []claim) (func(claim) bool, []string) {
	allowed := map[string][]string{}
	for k, v := range o.Allowed {
		allowed[strings.ToLower(k)] = v
	}
	byUnit := map[string][]claim{}
	for _, c := range claims {
		byUnit[c.unit()] = append(byUnit[c.unit()], c)
	}
	var warnings []string
	refused := map[claim]bool{}
	for _, unit := range sortedNames(byUnit) {
		cs := byUnit[unit]
		first := cs[0]
		if list, ok := o.allowedFor(allowed, first); ok {
			for _, c := range cs {
				if !slices.Contains(list, c.service) {
					refused[c] = true
					warnings = append(warnings, fmt.Sprintf("service %q tag %q: %s is reserved by tag_routes owners for %s; the route is not served (add the service to owners to let it share)",
						c.service, c.tag, describeUnit(c), quoted(list)))
				}
			}
			continue
		}
		if d := o.policyDomain(first); d != "" {
			for _, c := range cs {
				refused[c] = true
				warnings = append(warnings, fmt.Sprintf("service %q tag %q: %s is served by the policy's own virtual host (domain %q); tags may add routes to it only for services listed in tag_routes owners",
					c.service, c.tag, describeUnit(c), d))
			}
			continue
		}
		owner := slices.MinFunc(cs, func(a, b claim) int { return strings.Compare(a.service, b.service) }).service
		for _, c := range cs {
			if c.service != owner {
				refused[c] = true
				warnings = append(warnings, fmt.Sprintf("service %q tag %q: %s is already routed by service %q (hosts compare case-insensitively; of the services claiming it, the name that sorts first routes it); the route is not served, list both in tag_routes owners to share it",
					c.service, c.tag, describeUnit(c), owner))
			}
		}
	}
	return func(c claim) bool { return !refused[c] }, dedupe(warnings)
}

// allowedFor is the owners list that governs a claim's unit, if any.
func (o Owners) allowedFor(allowed map[string][]string, c claim) ([]string, bool) {
	if c.host != "" {
		list, ok := allowed[c.host]
		return list, ok
	}
	if c.path != "" {
		if list, ok := allowed[c.path]; ok && strings.HasPrefix(c.path, "/") {
			return list, true
		}
	}
	list, ok := allowed["*"]
	return list, ok
}

// policyDomain is the listener's domain that serves a claim's host
// ahead of any virtual host tags could add ("" if none).
func (o Owners) policyDomain(c claim) string {
	return PolicyDomain(o.Domains, c.host)
}

// PolicyDomain is the domain, of a listener's own virtual hosts' domains,
// whose virtual host Envoy picks for host (lower-cased; "" for host-less
// routes) before any virtual host tags could add, or "" if none: an equal
// domain, else the longest suffix wildcard ("*.example.com"), else the
// longest prefix wildcard ("shop.*"). The bare "*" serves host-less routes
// only; a named host of its own is more specific, so it does not take
// the policy's catch-all.
func PolicyDomain(domains []string, host string) string {
	var suffix, prefix string
	for _, d := range domains {
		ld := strings.ToLower(d)
		switch {
		case host == "" && ld == "*":
			return d
		case host == "" || ld == "*":
		case ld == host:
			return d
		case strings.HasPrefix(ld, "*") && len(host) > len(ld)-1 && strings.HasSuffix(host, ld[1:]):
			if len(d) > len(suffix) {
				suffix = d
			}
		case strings.HasSuffix(ld, "*") && len(host) > len(ld)-1 && strings.HasPrefix(host, ld[:len(ld)-1]):
			if len(d) > len(prefix) {
				prefix = d
			}
		}
	}
	if suffix != "" {
		return suffix
	}
	return prefix
}

func quoted(list []string) string {
	if len(list) == 0 {
		return "no service"
	}
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

func dedupe(ws []string) []string {
	seen := map[string]bool{}
	return slices.DeleteFunc(ws, func(w string) bool {
		if seen[w] {
			return true
		}
		seen[w] = true
		return false
	})
}
