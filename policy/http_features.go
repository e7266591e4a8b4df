package policy

import (
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Resolving the HTTP-feature blocks of listeners, virtual hosts and
// routes (http_schema.go). Each block is checked here, at the position of
// the value at fault, so `validate` catches what Envoy would NACK.

// corsOrigin is an origin as browsers send it: scheme://host[:port], lower
// case, no path. Envoy compares the Origin header with allow_origins
// exactly, so "https://Shop.example.com/" would never match anything.
var corsOrigin = regexp.MustCompile(`^[a-z][a-z0-9+.-]*://[a-z0-9.\-\[\]:_]+$`)

// vhostHTTP resolves a virtual host's HTTP settings and its routes' (the
// routes are resolved already, in vb's order), so that a route's block
// inherits what it leaves out from its virtual host's.
func (r *resolver) vhostHTTP(vb *virtualHostBlock, vh *VirtualHost) {
	vh.HTTP.CORS = r.cors(vb.CORS, nil)
	vh.HTTP.RateLimit = r.rateLimit(vb.RateLimit)
	vh.HTTP.JWT = r.jwtRule(vb.JWT)
	vh.HTTP.GlobalRateLimits = r.globalRateLimits(vb.GlobalRL)
	for i, rb := range vb.Routes {
		if i >= len(vh.Routes) {
			break
		}
		rt := vh.Routes[i]
		rt.HTTP.CORS = r.cors(rb.CORS, vh.HTTP.CORS)
		rt.HTTP.Upgrades = r.upgrades(rb.Body, rb.Upgrades, rb.DefRange)
		rt.HTTP.RateLimit = r.rateLimit(rb.RateLimit)
		rt.HTTP.NoCompression = rb.Compression != nil && !*rb.Compression
		rt.HTTP.NoExtAuthz = rb.ExtAuthz != nil && !*rb.ExtAuthz
		rt.HTTP.JWT = r.jwtRule(rb.JWT)
		rt.HTTP.GlobalRateLimits = r.globalRateLimits(rb.GlobalRL)
		if rb.GlobalRL != nil && len(rt.Targets) == 0 {
			r.add(rb.GlobalRL.DefRange, "global_rate_limit without a service", "Envoy takes a route's rate limits from its forwarding action: redirects and direct responses have none; set it on the virtual host instead.")
		}
		if len(rb.Upgrades) > 0 && len(rt.Targets) == 0 {
			r.add(valueRange(rb.Body, "upgrades", rb.DefRange), "upgrades without a service", "upgrades apply to routes that forward to a service, not to redirects or direct responses.")
		}
	}
}

// listenerHTTP resolves a listener's HTTP features; a tcp listener has
// none.
func (r *resolver) listenerHTTP(group string, b *listenerBlock, l *Listener, where string) {
	if l.Protocol == "tcp" {
		if b.Upgrades != nil {
			r.add(valueRange(b.Body, "upgrades", b.DefRange), "upgrades on a tcp listener", "%s is protocol \"tcp\": it forwards connections whatever they carry; upgrades apply to http listeners.", where)
		}
		if b.Tracing != nil {
			r.add(b.Tracing.DefRange, "tracing on a tcp listener", "%s is protocol \"tcp\": spans are per HTTP request; use protocol = \"http\".", where)
		}
		for _, al := range b.AccessLogs {
			r.add(al.DefRange, "access_log on a tcp listener", "%s is protocol \"tcp\": access logs are written by the HTTP connection manager; use protocol = \"http\".", where)
		}
		if b.Compression != nil {
			r.add(b.Compression.DefRange, "compression on a tcp listener", "%s is protocol \"tcp\": it cannot compress what it does not parse; use protocol = \"http\".", where)
		}
		if b.ExtAuthz != nil {
			r.add(b.ExtAuthz.DefRange, "ext_authz on a tcp listener", "%s is protocol \"tcp\": the authorization filter checks HTTP requests; use protocol = \"http\".", where)
		}
		for _, p := range b.JWTProviders {
			r.add(p.DefRange, "jwt_provider on a tcp listener", "%s is protocol \"tcp\": tokens are verified in HTTP requests; use protocol = \"http\".", where)
		}
		if b.RateLimitSvc != nil {
			r.add(b.RateLimitSvc.DefRange, "rate_limit_service on a tcp listener", "%s is protocol \"tcp\": the global rate limit filter counts HTTP requests; use protocol = \"http\".", where)
		}
		if b.RateLimit != nil {
			r.add(b.RateLimit.DefRange, "rate_limit on a tcp listener", "%s is protocol \"tcp\": the local rate limit counts HTTP requests; use protocol = \"http\".", where)
		}
		return
	}
	l.HTTP.Upgrades = r.upgrades(b.Body, b.Upgrades, b.DefRange)
	l.HTTP.RateLimit = r.rateLimit(b.RateLimit)
	l.HTTP.Compression = r.compression(b.Compression)
	l.HTTP.ExtAuthz = r.extAuthz(b.ExtAuthz)
	r.jwtProviders(b, l)
	r.checkJWTRules(b, l, where)
	l.HTTP.RateLimitService = r.rateLimitService(b.RateLimitSvc)
	r.checkGlobalRateLimits(b, l, where)
	for _, al := range b.AccessLogs {
		l.HTTP.AccessLogs = append(l.HTTP.AccessLogs, r.accessLog(al))
	}
	if tb := b.Tracing; tb != nil {
		tr := &ir.Tracing{Collector: tb.Collector, ServiceName: group, SamplePercent: r.percent(tb.Body, "sample_percent", tb.SamplePercent, tb.DefRange)}
		set(&tr.ServiceName, tb.ServiceName)
		set(&tr.PreserveRequestID, tb.PreserveRequestID)
		r.grpcCluster(tr.Collector, "tracing collector", valueRange(tb.Body, "collector", tb.DefRange))
		l.HTTP.Tracing = tr
	}
	for _, vb := range b.VirtualHosts {
		for _, rb := range vb.Routes {
			if rb.ExtAuthz != nil && l.HTTP.ExtAuthz == nil {
				r.warn(valueRange(rb.Body, "ext_authz", rb.DefRange), "ext_authz on a route of a listener without one", "%s has no ext_authz block: ext_authz = %v changes nothing; a route can only opt out of its listener's.", where, *rb.ExtAuthz)
			}
			if rb.ExtAuthz != nil && *rb.ExtAuthz && l.HTTP.ExtAuthz != nil {
				r.warn(valueRange(rb.Body, "ext_authz", rb.DefRange), "ext_authz = true does nothing", "every route of %s is checked unless it sets ext_authz = false.", where)
			}
		}
	}
	if l.HTTP.Compression == nil {
		for _, vb := range b.VirtualHosts {
			for _, rb := range vb.Routes {
				if rb.Compression != nil && !*rb.Compression {
					r.warn(valueRange(rb.Body, "compression", rb.DefRange), "compression = false does nothing", "%s has no compression block, so nothing is compressed anyway.", where)
				}
			}
		}
	}
}

// upgrades checks a list of connection upgrades (the Upgrade header's
// protocol names), lower-cased as Envoy compares them.
func (r *resolver) upgrades(body hcl.Body, list []string, def hcl.Range) []string {
	var out []string
	for i, u := range list {
		rng := elemRange(body, "upgrades", i, def)
		name := strings.ToLower(u)
		switch {
		case name == "connect":
			r.add(rng, "Unsupported upgrade", "CONNECT is a method, not an Upgrade; Envoy proxies it only on routes with a CONNECT matcher, which the policy does not offer.")
		case !headerName.MatchString(name):
			r.add(rng, "Invalid upgrade", "%q is not a protocol name for the Upgrade header, e.g. \"websocket\".", u)
		case slices.Contains(out, name):
			r.add(rng, "Duplicate upgrade", "%q is listed twice.", u)
		default:
			out = append(out, name)
		}
	}
	return out
}

// cors resolves b, taking what b leaves out from inherit (the virtual
// host's policy); with no block the route keeps its virtual host's.
func (r *resolver) cors(b *corsBlock, inherit *ir.CORS) *ir.CORS {
	if b == nil {
		return nil
	}
	c := &ir.CORS{}
	if inherit != nil {
		*c = *inherit
	}
	if b.AllowOrigins != nil {
		c.AllowOrigins = b.AllowOrigins
		for i, o := range b.AllowOrigins {
			if o != "*" && !corsOrigin.MatchString(o) {
				r.add(elemRange(b.Body, "allow_origins", i, b.DefRange), "Invalid CORS origin",
					"%q is not an origin as browsers send it: \"*\" or scheme://host[:port], lower case, without a path or trailing slash (e.g. \"https://shop.example.com\"). Use allow_origin_regex for patterns.", o)
			}
		}
	}
	if b.AllowOriginRegex != nil {
		c.AllowOriginRegex = b.AllowOriginRegex
		for i, re := range b.AllowOriginRegex {
			if err := ir.CheckRegex(re); err != nil {
				r.add(elemRange(b.Body, "allow_origin_regex", i, b.DefRange), "Invalid regular expression", "allow_origin_regex %v.", err)
			}
		}
	}
	if b.AllowMethods != nil {
		c.AllowMethods = b.AllowMethods
		for i, m := range b.AllowMethods {
			if !methodName.MatchString(m) {
				r.add(elemRange(b.Body, "allow_methods", i, b.DefRange), "Invalid method", "allow_methods: %q must be an upper-case HTTP method such as \"GET\".", m)
			}
		}
	}
	for _, hl := range []struct {
		name string
		in   []string
		dst  *[]string
	}{{"allow_headers", b.AllowHeaders, &c.AllowHeaders}, {"expose_headers", b.ExposeHeaders, &c.ExposeHeaders}} {
		if hl.in == nil {
			continue
		}
		*hl.dst = hl.in
		for i, h := range hl.in {
			if h != "*" && !headerName.MatchString(h) {
				r.add(elemRange(b.Body, hl.name, i, b.DefRange), "Invalid header name", "%s: %q is not a valid HTTP header name (or \"*\").", hl.name, h)
			}
		}
	}
	if b.MaxAge != nil && !isNull(b.MaxAge) {
		var d time.Duration
		if ds := durationAttr(b.MaxAge, &d); ds.HasErrors() {
			r.extend(ds)
		} else if d%time.Second != 0 {
			r.add(b.MaxAge.Range(), "Invalid max_age", "max_age %s: Access-Control-Max-Age counts whole seconds; use e.g. \"10m\" or \"30s\".", d)
		} else {
			c.MaxAge = d
		}
	}
	set(&c.AllowCredentials, b.AllowCredentials)
	if len(c.AllowOrigins) == 0 && len(c.AllowOriginRegex) == 0 {
		r.add(b.DefRange, "CORS without origins", "cors allows no origin, so Envoy would answer no preflight; set allow_origins (e.g. [\"https://shop.example.com\"]) or allow_origin_regex.")
	}
	if c.AllowCredentials && slices.Contains(c.AllowOrigins, "*") {
		// Envoy answers with the request's own Origin, not "*", so the
		// browser would send cookies from any site.
		r.add(valueRange(b.Body, "allow_credentials", b.DefRange), "Credentials for any origin",
			"allow_credentials = true with allow_origins = [\"*\"] lets every web site make requests with the user's cookies (Envoy echoes the request's Origin); list the origins instead.")
	}
	return c
}

// routeFilter is a per-route HTTP filter setting a route block has.
type routeFilter struct {
	what string
	rng  hcl.Range
}

// routeFilters lists the per-route HTTP filter settings of b, in a fixed
// order, for the places that serve routes without those filters (gRPC's
// xDS client, a sidecar's upstream listener).
func routeFilters(b *routeBlock) []routeFilter {
	var fs []routeFilter
	add := func(set bool, what string, rng func() hcl.Range) {
		if set {
			fs = append(fs, routeFilter{what, rng()})
		}
	}
	attr := func(name string) func() hcl.Range {
		return func() hcl.Range { return valueRange(b.Body, name, b.DefRange) }
	}
	add(b.CORS != nil, "cors", func() hcl.Range { return b.CORS.DefRange })
	add(b.Compression != nil, "compression", attr("compression"))
	add(b.RateLimit != nil, "rate_limit", func() hcl.Range { return b.RateLimit.DefRange })
	add(b.GlobalRL != nil, "global_rate_limit", func() hcl.Range { return b.GlobalRL.DefRange })
	add(b.JWT != nil, "jwt", func() hcl.Range { return b.JWT.DefRange })
	add(b.ExtAuthz != nil, "ext_authz", attr("ext_authz"))
	add(b.Upgrades != nil, "upgrades", attr("upgrades"))
	return fs
}

// grpcNoFilter says why gRPC's xDS client cannot apply each route filter.
var grpcNoFilter = map[string]string{
	"cors":              "gRPC's xDS client has no CORS filter; browsers reach gRPC services through an Envoy listener (grpc-web).",
	"compression":       "gRPC compresses messages itself (grpc-encoding), configured in the client.",
	"rate_limit":        "gRPC's xDS client has no rate limit filter; limit calls on the server, or in an Envoy in front of it.",
	"global_rate_limit": "gRPC's xDS client has no rate limit filter; limit calls on the server, or in an Envoy in front of it.",
	"jwt":               "gRPC's xDS client has no JWT authentication filter; verify tokens in the server (an interceptor) or in an Envoy in front of it.",
	"ext_authz":         "gRPC's xDS client has no external authorization filter; authorize calls in the server (an interceptor) or in an Envoy in front of it.",
	"upgrades":          "gRPC calls are HTTP/2 streams, never upgraded connections.",
}

// grpcUnsupportedHTTP refuses, in a grpc_service route, the HTTP
// features gRPC's xDS client does not implement: it would ignore them,
// serving something other than the policy says.
func (r *resolver) grpcUnsupportedHTTP(b *routeBlock, unsupported func(rng hcl.Range, what, why string)) {
	for _, f := range routeFilters(b) {
		unsupported(f.rng, f.what, grpcNoFilter[f.what])
	}
}

// minFillInterval is Envoy's shortest token bucket fill interval.
const minFillInterval = 50 * time.Millisecond

// rateLimit resolves a local rate limit block.
func (r *resolver) rateLimit(b *rateLimitBlock) *ir.LocalRateLimit {
	if b == nil {
		return nil
	}
	rl := &ir.LocalRateLimit{Status: 429}
	rl.Requests, rl.Interval, rl.Burst = r.bucket(b.Body, b.Requests, b.Interval, b.Burst, b.DefRange)
	if b.Status != nil {
		// Envoy answers 429 for anything below 400.
		if *b.Status < 400 || *b.Status > 599 {
			r.add(valueRange(b.Body, "status", b.DefRange), "Invalid status", "rate_limit status %d is not between 400 and 599 (Envoy would answer 429).", *b.Status)
		}
		rl.Status = *b.Status
	}
	for _, n := range keys(b.Headers) {
		if !headerName.MatchString(n) || strings.HasPrefix(n, ":") {
			r.add(keyRange(b.Body, "headers", n, b.DefRange), "Invalid header", "%q is not a valid HTTP header name.", n)
		}
	}
	rl.ResponseHeaders = b.Headers
	set(&rl.RateLimitHeaders, b.RateLimitHeaders)
	seen := map[string]hcl.Range{}
	for _, db := range b.Descriptors {
		d := ir.RateLimitDescriptor{}
		set(&d.Header, db.Header)
		set(&d.ClientAddress, db.ClientAddress)
		set(&d.Value, db.Value)
		d.Header = strings.ToLower(d.Header)
		switch {
		case (db.Header != nil) == d.ClientAddress:
			r.add(db.DefRange, "Invalid descriptor", "a descriptor selects requests by header = \"NAME\" or client_address = true, exactly one of them.")
		case db.Header != nil && !headerName.MatchString(d.Header):
			r.add(valueRange(db.Body, "header", db.DefRange), "Invalid header name", "%q is not a valid HTTP header name.", *db.Header)
		}
		d.Requests, d.Interval, d.Burst = r.bucket(db.Body, db.Requests, db.Interval, db.Burst, db.DefRange)
		if rl.Interval > 0 && d.Interval%rl.Interval != 0 {
			r.add(valueRange(db.Body, "interval", db.DefRange), "Invalid descriptor interval",
				"interval %s is not a multiple of the rate_limit's own interval %s, which Envoy requires of descriptor buckets.", d.Interval, rl.Interval)
		}
		id := d.Key() + "\x00" + d.Value
		if prev, ok := seen[id]; ok {
			r.add(db.DefRange, "Duplicate descriptor", "a descriptor for %s with this value is already defined at %s.", d.Key(), pos(prev))
		}
		seen[id] = db.DefRange
		rl.Descriptors = append(rl.Descriptors, d)
	}
	return rl
}

// bucket checks a token bucket: requests tokens every interval (default
// 1s), holding at most burst (default requests).
func (r *resolver) bucket(body hcl.Body, requests int, interval hcl.Expression, burst *int, def hcl.Range) (uint32, time.Duration, uint32) {
	n := r.positive(body, "requests", requests, def)
	d := time.Second
	if interval != nil && !isNull(interval) {
		if ds := durationAttr(interval, &d); ds.HasErrors() {
			r.extend(ds)
		} else if d < minFillInterval || d%time.Millisecond != 0 {
			r.add(interval.Range(), "Invalid interval", "interval %s: Envoy refills a token bucket at most every 50ms, in whole milliseconds.", d)
		}
	}
	max := n
	if burst != nil {
		max = r.positive(body, "burst", *burst, def)
		if max < n {
			r.add(valueRange(body, "burst", def), "Invalid burst", "burst %d is below requests %d: the bucket holds at most burst tokens, so a refill could never add requests.", max, n)
		}
	}
	return n, d, max
}

var (
	compressionAlgorithms = []string{"gzip", "brotli", "zstd"}
	mediaType             = regexp.MustCompile(`^[a-z0-9!#$&^_.+-]+/[a-z0-9!#$&^_.+-]+$`)
)

// compression resolves a listener's compression block.
func (r *resolver) compression(b *compressionBlock) *ir.Compression {
	if b == nil {
		return nil
	}
	c := &ir.Compression{Algorithms: []string{"gzip"}}
	if b.Algorithms != nil {
		c.Algorithms = nil
		if len(b.Algorithms) == 0 {
			r.add(valueRange(b.Body, "algorithms", b.DefRange), "No compression algorithm", "list at least one of %s, or remove the compression block.", quoteList(compressionAlgorithms))
		}
		for i, a := range b.Algorithms {
			rng := elemRange(b.Body, "algorithms", i, b.DefRange)
			switch {
			case !oneOf(a, compressionAlgorithms):
				r.add(rng, "Invalid compression algorithm", "%q is not one of %s.", a, quoteList(compressionAlgorithms))
			case slices.Contains(c.Algorithms, a):
				r.add(rng, "Duplicate compression algorithm", "%q is listed twice.", a)
			default:
				c.Algorithms = append(c.Algorithms, a)
			}
		}
	}
	for i, t := range b.ContentTypes {
		if !mediaType.MatchString(t) {
			r.add(elemRange(b.Body, "content_types", i, b.DefRange), "Invalid content type", "%q is not a media type such as \"application/json\" (lower case, no parameters).", t)
		}
	}
	c.ContentTypes = b.ContentTypes
	if b.MinLength != nil {
		c.MinLength = r.nonNegative(b.Body, "min_length", b.MinLength, b.DefRange)
	}
	return c
}

var statusClasses = []string{"1xx", "2xx", "3xx", "4xx", "5xx"}

// accessLog resolves an access_log block.
func (r *resolver) accessLog(b *accessLogBlock) ir.AccessLog {
	al := ir.AccessLog{SamplePercent: 100}
	set(&al.Path, b.Path)
	set(&al.Collector, b.Collector)
	set(&al.Format, b.Format)
	al.JSON = b.JSON
	switch {
	case (b.Path == nil) == (b.Collector == nil):
		r.add(b.DefRange, "Invalid access_log", "an access_log writes to path = \"/dev/stdout\" (or a file) or sends to collector = \"SERVICE\" (OpenTelemetry over gRPC), exactly one of them.")
	case b.Path != nil && !strings.HasPrefix(al.Path, "/"):
		r.add(valueRange(b.Body, "path", b.DefRange), "Invalid access_log path", "path %q must be absolute: it is a file on each Envoy's host (\"/dev/stdout\" for standard output).", al.Path)
	case b.Collector != nil:
		r.grpcCluster(al.Collector, "access_log collector", valueRange(b.Body, "collector", b.DefRange))
	}
	if b.Format != nil && b.JSON != nil {
		r.add(valueRange(b.Body, "json", b.DefRange), "Conflicting access_log formats", "an access_log uses format (a line) or json (an object), not both.")
	}
	if b.Format != nil {
		// %% is a literal percent; every other % opens or closes a
		// command operator, which Envoy rejects unclosed.
		if strings.Count(strings.ReplaceAll(al.Format, "%%", ""), "%")%2 != 0 {
			r.add(valueRange(b.Body, "format", b.DefRange), "Invalid access_log format", "format has an unclosed command operator: each one is %%NAME%% or %%NAME(ARG)%%, a literal percent is %%%%.")
		}
		if b.Path != nil && !strings.HasSuffix(al.Format, "\n") {
			// Envoy writes the format as it is: without a newline every
			// request would continue the last line.
			al.Format += "\n"
		}
	}
	for _, k := range keys(b.JSON) {
		if v := b.JSON[k]; strings.Count(strings.ReplaceAll(v, "%%", ""), "%")%2 != 0 {
			r.add(keyRange(b.Body, "json", k, b.DefRange), "Invalid access_log format", "json %q: %q has an unclosed command operator (%%NAME%%).", k, v)
		}
	}
	for i, c := range b.StatusClasses {
		if !oneOf(c, statusClasses) {
			r.add(elemRange(b.Body, "status_classes", i, b.DefRange), "Invalid status class", "%q is not one of %s.", c, quoteList(statusClasses))
		}
	}
	al.StatusClasses = b.StatusClasses
	if b.MinDuration != nil && !isNull(b.MinDuration) {
		r.extend(durationAttr(b.MinDuration, &al.MinDuration))
		if al.MinDuration%1000000 != 0 {
			r.add(b.MinDuration.Range(), "Invalid min_duration", "min_duration %s: Envoy compares durations in whole milliseconds.", al.MinDuration)
		}
	}
	al.SamplePercent = r.percent(b.Body, "sample_percent", b.SamplePercent, b.DefRange)
	return al
}
