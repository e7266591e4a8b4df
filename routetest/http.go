package routetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/routetest/routematch"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	localratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/hashicorp/hcl/v2"
	"google.golang.org/protobuf/types/known/anypb"
)

// Expectations on what the HTTP filters in front of the router do with a
// request, evaluated like Envoy from the per-filter config of the matched
// route and its virtual host.

// corsFilter is the CORS filter's name, the key of its per-route config.
const (
	corsFilter           = "envoy.filters.http.cors"
	localRateLimitFilter = "envoy.filters.http.local_ratelimit"
)

// httpExpect is what a test asserts about HTTP filters.
type httpExpect struct {
	// CORSPreflight: true, Envoy answers the request itself as a CORS
	// preflight (200); false, it does not.
	CORSPreflight *bool
	// CORSHeaders are the CORS response headers Envoy adds, by lower-case
	// name; "" asserts the header is absent.
	CORSHeaders map[string]string
	// RateLimit is where the local rate limit that applies is set:
	// "route", "virtual_host", "listener" or "none".
	RateLimit *string
	// RateLimitDescriptors are the descriptor buckets the request takes a
	// token from besides the block's: "HEADER" (a bucket per value),
	// "HEADER=VALUE", "client_address"; in any order.
	RateLimitDescriptors []string
	// JWT is what Envoy's jwt_authn filter requires of the request's
	// token: "required", "allow_missing" or "none" (jwt.go).
	JWT *string
}

func decodeHTTPExpect(t *Test, e *expectSchema, errorAt func(name, summary, detail string)) hcl.Diagnostics {
	x := &t.Expect.HTTP
	x.CORSPreflight = e.CORSPreflight
	if e.CORSHeaders != nil {
		x.CORSHeaders = map[string]string{}
		for _, k := range slices.Sorted(maps.Keys(e.CORSHeaders)) {
			name := strings.ToLower(k)
			if !strings.HasPrefix(name, "access-control-") {
				errorAt("cors_headers", "Not a CORS header", fmt.Sprintf("%q: cors_headers asserts the Access-Control-* headers Envoy's CORS filter adds.", k))
			}
			x.CORSHeaders[name] = e.CORSHeaders[k]
		}
	}
	x.RateLimit, x.RateLimitDescriptors = e.RateLimit, e.RateLimitDesc
	decodeJWTExpect(t, e, errorAt)
	if e.RateLimit != nil && !slices.Contains(rateLimitPlaces, *e.RateLimit) {
		errorAt("rate_limit", "Invalid rate_limit", fmt.Sprintf("%q: rate_limit names where the applying rate_limit block is: %s.", *e.RateLimit, strings.Join(quoteAll(rateLimitPlaces), ", ")))
	}
	if e.NoRoute != nil && *e.NoRoute && e.CORSPreflight != nil && *e.CORSPreflight {
		errorAt("cors_preflight", "Expectation contradicts no_route", "Envoy's CORS filter only acts on a request that matches a route.")
	}
	return nil
}

// corsResult is what Envoy's CORS filter does with the request.
type corsResult struct {
	preflight bool
	headers   map[string]string
}

// cors evaluates Envoy's CORS filter (cors_filter.cc): it acts only on a
// request with an Origin that the policy of its route (else its virtual
// host) allows, each policy field taken from the most specific config
// that sets it. A preflight (OPTIONS with Access-Control-Request-Method)
// is answered with 200 and the allow headers; any other request gets
// Allow-Origin, Allow-Credentials and Expose-Headers added to the
// upstream's response. A preflight from an origin not allowed is
// forwarded upstream untouched (forward_not_matching_preflights).
func (c *check) cors() corsResult {
	res := corsResult{headers: map[string]string{}}
	if c.m.Route == nil {
		return res
	}
	var policies []*corsv3.CorsPolicy
	for _, m := range []map[string]*anypb.Any{c.m.Route.GetTypedPerFilterConfig(), c.m.VirtualHost.GetTypedPerFilterConfig()} {
		if a, ok := m[corsFilter]; ok {
			p := &corsv3.CorsPolicy{}
			if a.UnmarshalTo(p) == nil {
				policies = append(policies, p)
			}
		}
	}
	origin := c.t.Request.Headers["origin"]
	if len(policies) == 0 || origin == "" {
		return res
	}
	field := func(get func(*corsv3.CorsPolicy) string) string {
		for _, p := range policies {
			if v := get(p); v != "" {
				return v
			}
		}
		return ""
	}
	var origins []*matcherv3.StringMatcher
	credentials := false
	for _, p := range policies {
		if origins == nil && len(p.GetAllowOriginStringMatch()) > 0 {
			origins = p.GetAllowOriginStringMatch()
		}
	}
	for _, p := range policies {
		if p.GetAllowCredentials() != nil {
			credentials = p.GetAllowCredentials().GetValue()
			break
		}
	}
	allowed := slices.ContainsFunc(origins, func(m *matcherv3.StringMatcher) bool {
		return routematch.StringMatches(m, "*") || routematch.StringMatches(m, origin)
	})
	if !allowed {
		return res
	}
	res.headers["access-control-allow-origin"] = origin
	if credentials {
		res.headers["access-control-allow-credentials"] = "true"
	}
	if c.t.Request.Method == "OPTIONS" && c.t.Request.Headers["access-control-request-method"] != "" {
		res.preflight = true
		for name, get := range map[string]func(*corsv3.CorsPolicy) string{
			"access-control-allow-methods": (*corsv3.CorsPolicy).GetAllowMethods,
			"access-control-allow-headers": (*corsv3.CorsPolicy).GetAllowHeaders,
			"access-control-max-age":       (*corsv3.CorsPolicy).GetMaxAge,
		} {
			if v := field(get); v != "" {
				res.headers[name] = v
			}
		}
		return res
	}
	if v := field((*corsv3.CorsPolicy).GetExposeHeaders); v != "" {
		res.headers["access-control-expose-headers"] = v
	}
	return res
}

// filterStatus is a status an HTTP filter answers with before the
// router: 200 for a CORS preflight.
func (c *check) filterStatus() (int, bool) {
	if c.cors().preflight {
		return 200, true
	}
	return 0, false
}

func (c *check) evaluateHTTP() {
	x := &c.t.Expect.HTTP
	c.evaluateRateLimit()
	c.evaluateJWT()
	if x.CORSPreflight == nil && x.CORSHeaders == nil {
		return
	}
	cr := c.cors()
	if x.CORSPreflight != nil && cr.preflight != *x.CORSPreflight {
		what := "Envoy answers it as a CORS preflight (200)"
		if !cr.preflight {
			what = "Envoy does not answer it as a preflight: " + c.corsWhy()
		}
		c.fail("cors_preflight", "expected %v, got %v: %s", *x.CORSPreflight, cr.preflight, what)
	}
	for _, name := range slices.Sorted(maps.Keys(x.CORSHeaders)) {
		want, got := x.CORSHeaders[name], cr.headers[name]
		if want != got {
			c.fail("cors_headers", "%s: expected %q, got %q", name, want, got)
		}
	}
}

// corsWhy explains why a request is no preflight Envoy answers.
func (c *check) corsWhy() string {
	req := c.t.Request
	switch {
	case c.m.Route == nil:
		return "no route matches"
	case req.Headers["origin"] == "":
		return "the request has no Origin header"
	case req.Method != "OPTIONS" || req.Headers["access-control-request-method"] == "":
		return "a preflight is OPTIONS with Access-Control-Request-Method"
	case len(c.cors().headers) == 0:
		return "no cors policy of the route or its virtual host allows the origin"
	}
	return "it is not a preflight"
}

var rateLimitPlaces = []string{"route", "virtual_host", "listener", "none"}

// localRateLimit is the local rate limit config that applies to the
// request, as Envoy picks per-filter config: the route's, else the
// virtual host's, else the listener filter's own (which limits nothing
// without a token bucket).
func (c *check) localRateLimit() (*localratelimitv3.LocalRateLimit, string) {
	if c.m.Route == nil {
		return nil, "none"
	}
	for i, m := range []map[string]*anypb.Any{c.m.Route.GetTypedPerFilterConfig(), c.m.VirtualHost.GetTypedPerFilterConfig()} {
		if a, ok := m[localRateLimitFilter]; ok {
			rl := &localratelimitv3.LocalRateLimit{}
			if a.UnmarshalTo(rl) == nil {
				return rl, rateLimitPlaces[i]
			}
		}
	}
	if p := c.e.pol.ProxyFor(c.t.Proxy); p != nil && c.e.out.Groups[p.Name] != nil {
		for _, l := range c.e.out.Groups[p.Name].Listeners {
			if l.GetName() != c.res.RouteConfig {
				continue
			}
			for _, f := range listenerHTTPFilters(l) {
				rl := &localratelimitv3.LocalRateLimit{}
				if f.GetName() == localRateLimitFilter && f.GetTypedConfig().UnmarshalTo(rl) == nil && rl.GetTokenBucket() != nil {
					return rl, "listener"
				}
			}
		}
	}
	return nil, "none"
}

// rateLimitDescriptors are the descriptors of rl a request takes tokens
// from: each of the filter's rate_limits actions yields one entry (a
// header action none when the header is absent), matched by key and
// value exactly, else by a wildcard (empty value) descriptor of the key.
func (c *check) rateLimitDescriptors(rl *localratelimitv3.LocalRateLimit) []string {
	var out []string
	for _, limit := range rl.GetRateLimits() {
		for _, a := range limit.GetActions() {
			key, value, label := "", "", ""
			switch {
			case a.GetRemoteAddress() != nil:
				key, label = "remote_address", "client_address"
			case a.GetRequestHeaders() != nil:
				h := a.GetRequestHeaders()
				v, ok := c.t.Request.Headers[strings.ToLower(h.GetHeaderName())]
				if !ok {
					continue
				}
				key, value, label = h.GetDescriptorKey(), v, h.GetDescriptorKey()
			default:
				continue
			}
			wildcard := false
			exact := slices.ContainsFunc(rl.GetDescriptors(), func(d *ratelimitv3.LocalRateLimitDescriptor) bool {
				e := d.GetEntries()
				if len(e) == 1 && e[0].GetKey() == key && e[0].GetValue() == "" {
					wildcard = true
				}
				return len(e) == 1 && e[0].GetKey() == key && e[0].GetValue() == value && value != ""
			})
			switch {
			case exact:
				out = append(out, label+"="+value)
			case wildcard:
				out = append(out, label)
			}
		}
	}
	return out
}

func (c *check) evaluateRateLimit() {
	x := &c.t.Expect.HTTP
	if x.RateLimit == nil && x.RateLimitDescriptors == nil {
		return
	}
	rl, where := c.localRateLimit()
	if x.RateLimit != nil && where != *x.RateLimit {
		c.fail("rate_limit", "expected the %s's rate_limit, got %s", *x.RateLimit, where)
	}
	if x.RateLimitDescriptors != nil {
		got := c.rateLimitDescriptors(rl)
		if !sameSet(got, x.RateLimitDescriptors) {
			c.fail("rate_limit_descriptors", "expected %s, got %s", formatList(x.RateLimitDescriptors), formatList(got))
		}
	}
}

// listenerHTTPFilters are the HTTP filters of a listener's connection
// managers.
func listenerHTTPFilters(l *listenerv3.Listener) []*hcmv3.HttpFilter {
	var out []*hcmv3.HttpFilter
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			h := &hcmv3.HttpConnectionManager{}
			if f.GetTypedConfig().UnmarshalTo(h) == nil {
				out = append(out, h.GetHttpFilters()...)
			}
		}
	}
	return out
}
