// Package routematch evaluates an HTTP request against an Envoy
// RouteConfiguration the way Envoy's router does: virtual host by the Host
// header, then the first route whose matchers all match. It backs
// `consul-xds-bridge test`, so operators can check a policy's routing in CI
// without an Envoy.
package routematch

import (
	"net/url"
	"regexp"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// Request is what a route test sends.
type Request struct {
	Host   string
	Path   string // may carry a query string
	Method string
	// Headers by lower-case name.
	Headers map[string]string
}

// Result is where a request went.
type Result struct {
	VirtualHost *routev3.VirtualHost
	Route       *routev3.Route // nil: no route matched (Envoy answers 404)
}

// Match finds the virtual host and route Envoy would pick.
func Match(rc *routev3.RouteConfiguration, req Request) Result {
	vh := selectVirtualHost(rc.GetVirtualHosts(), req.Host)
	if vh == nil {
		return Result{}
	}
	for _, r := range vh.GetRoutes() {
		if routeMatches(r.GetMatch(), req) {
			return Result{VirtualHost: vh, Route: r}
		}
	}
	return Result{VirtualHost: vh}
}

// selectVirtualHost follows Envoy's domain search order: an exact domain,
// then the longest suffix wildcard ("*.example.com"), then the longest
// prefix wildcard ("example.*"), then "*". Hosts compare case-insensitively.
// The port is stripped first, as the translator's HTTP connection managers
// set strip_any_host_port.
func selectVirtualHost(vhs []*routev3.VirtualHost, host string) *routev3.VirtualHost {
	return bestVirtualHost(vhs, stripPort(strings.ToLower(host)))
}

func stripPort(host string) string {
	if strings.HasPrefix(host, "[") { // [v6]:port
		if i := strings.LastIndex(host, "]"); i >= 0 {
			return host[:i+1]
		}
		return host
	}
	if h, _, ok := strings.Cut(host, ":"); ok {
		return h
	}
	return host
}

func bestVirtualHost(vhs []*routev3.VirtualHost, host string) *routev3.VirtualHost {
	var (
		suffix, prefix, star *routev3.VirtualHost
		suffixLen, prefixLen int
	)
	for _, vh := range vhs {
		for _, d := range vh.GetDomains() {
			d = strings.ToLower(d)
			switch {
			case d == host:
				return vh
			case d == "*":
				if star == nil {
					star = vh
				}
			case strings.HasPrefix(d, "*"):
				// "*.example.com" and "*-bar.foo.com": the wildcard must
				// match at least one character.
				if s := d[1:]; len(host) > len(s) && strings.HasSuffix(host, s) && len(s) > suffixLen {
					suffix, suffixLen = vh, len(s)
				}
			case strings.HasSuffix(d, "*"):
				if p := d[:len(d)-1]; len(host) > len(p) && strings.HasPrefix(host, p) && len(p) > prefixLen {
					prefix, prefixLen = vh, len(p)
				}
			}
		}
	}
	switch {
	case suffix != nil:
		return suffix
	case prefix != nil:
		return prefix
	}
	return star
}

func routeMatches(m *routev3.RouteMatch, req Request) bool {
	path, rawQuery, _ := strings.Cut(req.Path, "?")
	caseSensitive := m.GetCaseSensitive() == nil || m.GetCaseSensitive().GetValue()
	switch ps := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		if !hasPrefix(path, ps.Prefix, caseSensitive) {
			return false
		}
	case *routev3.RouteMatch_Path:
		if !equal(path, ps.Path, caseSensitive) {
			return false
		}
	case *routev3.RouteMatch_SafeRegex:
		// Envoy matches the whole path (without query); case_sensitive
		// does not apply to regexes.
		if !fullMatch(ps.SafeRegex.GetRegex(), path) {
			return false
		}
	default:
		return false
	}
	for _, h := range m.GetHeaders() {
		if !headerMatches(h, req) {
			return false
		}
	}
	if len(m.GetQueryParameters()) > 0 {
		q, _ := url.ParseQuery(rawQuery)
		for _, qm := range m.GetQueryParameters() {
			if !queryMatches(qm, q) {
				return false
			}
		}
	}
	return true
}

func hasPrefix(s, prefix string, caseSensitive bool) bool {
	if caseSensitive {
		return strings.HasPrefix(s, prefix)
	}
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func equal(a, b string, caseSensitive bool) bool {
	if caseSensitive {
		return a == b
	}
	return strings.EqualFold(a, b)
}

func fullMatch(pattern, s string) bool {
	re, err := regexp.Compile(`^(?:` + pattern + `)$`)
	return err == nil && re.MatchString(s)
}

// headerValue returns a request header, with the pseudo-headers Envoy
// derives from the request line.
func headerValue(req Request, name string) (string, bool) {
	switch name {
	case ":method":
		return strings.ToUpper(req.Method), req.Method != ""
	case ":authority", "host":
		return req.Host, req.Host != ""
	case ":path":
		return req.Path, true
	}
	v, ok := req.Headers[strings.ToLower(name)]
	return v, ok
}

func headerMatches(h *routev3.HeaderMatcher, req Request) bool {
	v, present := headerValue(req, h.GetName())
	if _, presence := h.GetHeaderMatchSpecifier().(*routev3.HeaderMatcher_PresentMatch); !present && !presence && h.GetHeaderMatchSpecifier() != nil {
		// Envoy: a missing header fails a value match, inverted or not
		// (treat_missing_header_as_empty is off).
		return false
	}
	var ok bool
	switch spec := h.GetHeaderMatchSpecifier().(type) {
	case *routev3.HeaderMatcher_PresentMatch:
		ok = present == spec.PresentMatch
	case *routev3.HeaderMatcher_StringMatch:
		ok = present && StringMatches(spec.StringMatch, v)
	case nil:
		ok = present
	default:
		ok = false
	}
	if h.GetInvertMatch() {
		return !ok
	}
	return ok
}

func queryMatches(qm *routev3.QueryParameterMatcher, q url.Values) bool {
	vals, present := q[qm.GetName()]
	switch spec := qm.GetQueryParameterMatchSpecifier().(type) {
	case *routev3.QueryParameterMatcher_PresentMatch:
		return present == spec.PresentMatch
	case *routev3.QueryParameterMatcher_StringMatch:
		// Envoy checks the first value of a repeated parameter.
		return present && StringMatches(spec.StringMatch, vals[0])
	}
	return present
}

// StringMatches is Envoy's StringMatcher on v: ignore_case applies to
// exact, prefix, suffix and contains; a safe_regex must match the whole
// value, case as written (Envoy ignores ignore_case for it).
func StringMatches(m *matcherv3.StringMatcher, v string) bool {
	in := v
	if m.GetIgnoreCase() {
		in = strings.ToLower(v)
	}
	lower := func(s string) string {
		if m.GetIgnoreCase() {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return in == lower(p.Exact)
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(in, lower(p.Prefix))
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(in, lower(p.Suffix))
	case *matcherv3.StringMatcher_Contains:
		return strings.Contains(in, lower(p.Contains))
	case *matcherv3.StringMatcher_SafeRegex:
		return fullMatch(p.SafeRegex.GetRegex(), v)
	}
	return false
}
