package policy

import (
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/hashicorp/hcl/v2"
)

// Resolving one route block: its match, action, redirect and header
// changes (resolve.go holds the rest of the resolver).

func (r *resolver) route(b *routeBlock, where string) *Route {
	rt := &Route{Source: pos(b.DefRange), Range: b.DefRange}
	if b.Chain != nil && !*b.Chain {
		if r.noChain == nil {
			r.noChain = map[*Route]bool{}
		}
		r.noChain[rt] = true
	}
	where = where + " at " + rt.Source
	other := 0
	if b.Redirect != nil {
		other++
		rt.Redirect = r.redirect(b.Redirect)
	}
	if b.DirectResponse != nil {
		other++
		dr := b.DirectResponse
		if dr.Status < 200 || dr.Status > 599 {
			r.add(valueRange(dr.HCLBody, "status", dr.DefRange), "Invalid status", "direct_response status %d is not between 200 and 599.", dr.Status)
		}
		rt.DirectResponse = &ir.DirectResponse{Status: dr.Status}
		set(&rt.DirectResponse.Body, dr.Body)
	}
	rt.Targets = r.action(b.Body, b.DefRange, where, true, b.Service, b.Subset, b.Splits, other)
	if b.Match != nil {
		rt.Match = r.match(b.Match)
	} else {
		rt.Match = ir.RouteMatch{PathPrefix: "/", CaseSensitive: true}
	}
	r.extend(durationAttrZero(b.Timeout, &rt.Timeout))
	r.extend(durationAttrZero(b.IdleTimeout, &rt.IdleTimeout))
	if rb := b.Retry; rb != nil {
		rt.Retry = &ir.Retry{Attempts: 1, On: rb.On}
		if rb.Attempts != nil {
			rt.Retry.Attempts = r.positive(rb.Body, "attempts", *rb.Attempts, rb.DefRange)
		}
		r.extend(durationAttr(rb.PerTryTimeout, &rt.Retry.PerTryTimeout))
		r.retryBackOff(rb, rt.Retry)
		if len(rt.Retry.On) == 0 {
			rt.Retry.On = []string{"5xx", "connect-failure", "reset"}
		}
		for i, on := range rb.On {
			if !oneOf(on, retryOn) {
				r.add(elemRange(rb.Body, "on", i, rb.DefRange), "Invalid retry condition", "%q is not one of Envoy's retry_on conditions: %s.", on, strings.Join(retryOn, ", "))
			}
		}
	}
	if rw := b.Rewrite; rw != nil {
		rt.Rewrite = &ir.Rewrite{}
		set(&rt.Rewrite.Prefix, rw.Prefix)
		set(&rt.Rewrite.Regex, rw.Regex)
		set(&rt.Rewrite.Substitution, rw.Substitution)
		set(&rt.Rewrite.Host, rw.Host)
		if rw.Prefix != nil && rw.Regex != nil {
			r.add(rw.DefRange, "Conflicting rewrites", "rewrite may set prefix or regex, not both.")
		}
		if rw.Regex != nil {
			r.regex(rw.Body, "regex", *rw.Regex, rw.DefRange)
			if rw.Substitution == nil {
				r.add(valueRange(rw.Body, "regex", rw.DefRange), "Missing substitution", "rewrite with regex needs substitution = \"...\" (use \\\\1 for capture groups).")
			}
		}
		if other > 0 {
			r.add(rw.DefRange, "rewrite without a service", "rewrite applies only to routes that forward to a service.")
		}
	}
	rt.RequestHeaders = r.headers(b.RequestHeaders)
	rt.ResponseHeaders = r.headers(b.ResponseHeaders)
	if m := b.Mirror; m != nil {
		rt.Mirror = &MirrorTarget{Target: Target{Service: m.Service, Weight: 1}, Percent: r.percent(m.Body, "percent", m.Percent, m.DefRange)}
		set(&rt.Mirror.Subset, m.Subset)
		if m.Service == "" {
			r.add(valueRange(m.Body, "service", m.DefRange), "Empty service", "mirror service must name a Consul service.")
		}
		r.target(rt.Mirror.Target, valueRange(m.Body, "service", m.DefRange), valueRange(m.Body, "subset", m.DefRange))
	}
	if f := b.Fault; f != nil {
		fault := &ir.Fault{}
		if f.Delay == nil && f.Abort == nil {
			r.add(f.DefRange, "Empty fault", "fault needs a delay block, an abort block, or both.")
		}
		if d := f.Delay; d != nil {
			// gohcl never requires an hcl.Expression field, so a missing
			// duration arrives as null.
			if d.Duration == nil || isNull(d.Duration) {
				r.add(d.DefRange, "Missing fault delay duration", "delay needs duration = \"...\" in Go syntax, e.g. duration = \"100ms\".")
			}
			r.extend(durationAttr(d.Duration, &fault.Delay))
			fault.DelayPercent = r.percent(d.Body, "percent", d.Percent, d.DefRange)
		}
		if a := f.Abort; a != nil {
			if a.Status < 200 || a.Status > 599 {
				r.add(valueRange(a.Body, "status", a.DefRange), "Invalid status", "abort status %d is not between 200 and 599.", a.Status)
			}
			fault.AbortStatus = a.Status
			fault.AbortPercent = r.percent(a.Body, "percent", a.Percent, a.DefRange)
		}
		rt.Fault = fault
	}
	return rt
}

func (r *resolver) redirect(b *redirectBlock) *ir.Redirect {
	rd := &ir.Redirect{Status: 301}
	set(&rd.Scheme, b.Scheme)
	set(&rd.Host, b.Host)
	set(&rd.Path, b.Path)
	set(&rd.Prefix, b.Prefix)
	set(&rd.StripQuery, b.StripQuery)
	set(&rd.Status, b.Status)
	if b.Port != nil {
		if *b.Port < 1 || *b.Port > 65535 {
			r.add(valueRange(b.Body, "port", b.DefRange), "Invalid port", "redirect port %d is not between 1 and 65535.", *b.Port)
		} else {
			rd.Port = uint32(*b.Port)
		}
	}
	if !oneOf(rd.Status, redirectStatuses) {
		r.add(valueRange(b.Body, "status", b.DefRange), "Invalid redirect status", "status %d is not one of 301, 302, 303, 307, 308.", rd.Status)
	}
	if b.Path != nil && b.Prefix != nil {
		r.add(b.DefRange, "Conflicting redirect", "redirect may replace the path or its prefix, not both.")
	}
	if rd.Scheme != "" && rd.Scheme != "http" && rd.Scheme != "https" {
		r.add(valueRange(b.Body, "scheme", b.DefRange), "Invalid scheme", "scheme %q is not \"http\" or \"https\".", rd.Scheme)
	}
	return rd
}

func (r *resolver) match(b *matchBlock) ir.RouteMatch {
	m := ir.RouteMatch{CaseSensitive: true}
	set(&m.PathPrefix, b.PathPrefix)
	set(&m.Path, b.Path)
	set(&m.PathRegex, b.PathRegex)
	set(&m.CaseSensitive, b.CaseSensitive)
	set(&m.Method, b.Method)
	n := 0
	for _, p := range []*string{b.PathPrefix, b.Path, b.PathRegex} {
		if p != nil {
			n++
		}
	}
	switch {
	case n > 1:
		r.add(b.DefRange, "Conflicting path matches", "match may use one of path_prefix, path or path_regex.")
	case n == 0:
		m.PathPrefix = "/"
	}
	if b.PathPrefix != nil && !strings.HasPrefix(*b.PathPrefix, "/") {
		r.add(valueRange(b.Body, "path_prefix", b.DefRange), "Invalid path_prefix", "path_prefix %q must start with \"/\".", *b.PathPrefix)
	}
	if b.Path != nil && !strings.HasPrefix(*b.Path, "/") {
		r.add(valueRange(b.Body, "path", b.DefRange), "Invalid path", "path %q must start with \"/\".", *b.Path)
	}
	if b.PathRegex != nil {
		r.regex(b.Body, "path_regex", *b.PathRegex, b.DefRange)
	}
	if b.Method != nil && !methodName.MatchString(*b.Method) {
		r.add(valueRange(b.Body, "method", b.DefRange), "Invalid method", "method %q must be an upper-case HTTP method such as \"GET\".", *b.Method)
	}
	m.Headers = r.valueMatches(b.Headers, "header", true)
	m.Query = r.valueMatches(b.Query, "query", false)
	return m
}

func (r *resolver) valueMatches(list []*valueMatcher, kind string, header bool) []ir.ValueMatch {
	var out []ir.ValueMatch
	for _, v := range list {
		vm := ir.ValueMatch{Name: v.Name}
		if header {
			vm.Name = strings.ToLower(v.Name)
			if !headerName.MatchString(strings.TrimPrefix(vm.Name, ":")) {
				r.add(v.DefRange, "Invalid header name", "%q is not a valid HTTP header name.", v.Name)
			}
		}
		n := 0
		if v.Exact != nil {
			vm.Exact, n = *v.Exact, n+1
		}
		if v.Prefix != nil {
			vm.Prefix, n = *v.Prefix, n+1
		}
		if v.Regex != nil {
			vm.Regex, n = *v.Regex, n+1
			r.regex(v.Body, "regex", *v.Regex, v.DefRange)
		}
		if v.Present != nil {
			vm.Present, n = *v.Present, n+1
			if !*v.Present {
				hint := "use present = true with invert = true to require absence"
				if !header {
					hint = "Envoy cannot match the absence of a query parameter"
				}
				r.add(valueRange(v.Body, "present", v.DefRange), "Invalid present", "present = false matches nothing; %s.", hint)
			}
		}
		set(&vm.Invert, v.Invert)
		if vm.Invert && !header {
			r.add(valueRange(v.Body, "invert", v.DefRange), "invert on a query match",
				"Envoy cannot invert a query parameter match; match what you want instead, or use a header match.")
		}
		if n != 1 {
			r.add(v.DefRange, "Invalid "+kind+" match", "%s %q needs exactly one of exact, prefix, regex or present; it has %d.", kind, v.Name, n)
		}
		out = append(out, vm)
	}
	return out
}

// regex checks a pattern as Envoy's RE2 engine will: Go's regexp parses
// RE2's syntax, and ir.CheckRegex refuses programs over Envoy's default
// size limit, which would make Envoy reject the whole resource.
func (r *resolver) regex(body hcl.Body, name, pattern string, def hcl.Range) {
	if err := ir.CheckRegex(pattern); err != nil {
		r.add(valueRange(body, name, def), "Invalid regular expression", "%s %v.", name, err)
	}
}

func (r *resolver) headers(b *headersBlock) ir.HeaderMutation {
	if b == nil {
		return ir.HeaderMutation{}
	}
	check := func(n string, rng hcl.Range) {
		switch {
		case strings.HasPrefix(n, ":") || strings.EqualFold(n, "host"):
			r.add(rng, "Invalid header", "header %q cannot be changed here: pseudo-headers and Host are off limits; use rewrite { host = \"...\" } to change the host.", n)
		case !headerName.MatchString(n):
			r.add(rng, "Invalid header", "%q is not a valid HTTP header name; use letters, digits and '-' (e.g. \"x-request-source\").", n)
		}
	}
	for _, attr := range []string{"add", "set"} {
		m := b.Add
		if attr == "set" {
			m = b.Set
		}
		for _, n := range keys(m) {
			check(n, keyRange(b.Body, attr, n, b.DefRange))
		}
	}
	for i, n := range b.Remove {
		check(n, elemRange(b.Body, "remove", i, b.DefRange))
	}
	return ir.HeaderMutation{Add: b.Add, Set: b.Set, Remove: b.Remove}
}
