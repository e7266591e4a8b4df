package xds

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	brotliv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/brotli/compressor/v3"
	gzipv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/gzip/compressor/v3"
	zstdv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/zstd/compressor/v3"
	compressorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	localratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// The HTTP filters of Envoy listeners and their per-route settings.
//
// Every filter a route or virtual host can turn on is installed on every
// Envoy HTTP listener, inert until typed_per_filter_config in RDS
// configures it (as the fault filter always was): turning CORS or a rate
// limit on for one route changes the route configuration only, never the
// listener, which Envoy would drain. Filters that only a listener
// configures (compression, access logs, and jwt_authn, ext_authz and
// ratelimit, whose providers and services only a listener names) are
// there when it does; routes then choose in RDS what they require.
//
// The order is fixed:
//
//	cors -> jwt_authn -> ext_authz -> local_ratelimit -> ratelimit -> fault -> compressor.* -> router
//
// CORS comes first so that a preflight (which browsers send without
// credentials) is answered before authentication or a rate limit could
// refuse it, as Envoy Gateway orders them. Authentication (jwt_authn)
// comes before authorization, so the authorization service sees the
// verified claims it adds as headers. Authorization comes before
// any rate limit: a request that will be refused anyway must not spend
// a client's tokens (and an authorization service is what tells a
// tenant apart). The local rate limit comes before the global one: it
// costs nothing and sheds a flood before it reaches the shared
// rate-limit service. The rate limits come before fault injection, so an
// injected abort still costs its token and a limited request is not
// delayed first. Compressors sit just before the router: they compress
// the upstream's responses, not Envoy's own answers to a preflight or a
// limited request (which are small).

// Filter names, the keys of typed_per_filter_config.
const (
	corsFilter           = "envoy.filters.http.cors"
	localRateLimitFilter = "envoy.filters.http.local_ratelimit"
	// localRateLimitStats prefixes the local rate limit's statistics
	// (http_local_rate_limit.<prefix>.rate_limited, ...).
	localRateLimitStats = "local_rate_limit"
)

// envoyHTTPFilters is the HTTP filter chain of an Envoy listener.
func envoyHTTPFilters(l *ir.Listener) []*hcmv3.HttpFilter {
	filters := []*hcmv3.HttpFilter{typedHTTPFilter(corsFilter, &corsv3.Cors{})}
	if len(l.HTTP.JWTProviders) > 0 {
		filters = append(filters, typedHTTPFilter(jwtAuthnFilter, buildJWTAuthn(l.HTTP.JWTProviders)))
	}
	if a := l.HTTP.ExtAuthz; a != nil {
		filters = append(filters, typedHTTPFilter(extAuthzFilter, buildExtAuthz(a)))
	}
	filters = append(filters,
		// Without a listener rate_limit the filter has no bucket and
		// limits nothing until a route's or virtual host's config does.
		typedHTTPFilter(localRateLimitFilter, buildLocalRateLimit(l.HTTP.RateLimit)),
	)
	if s := l.HTTP.RateLimitService; s != nil {
		filters = append(filters, typedHTTPFilter(rateLimitFilter, buildRateLimit(s)))
	}
	filters = append(filters, faultHTTPFilter())
	if c := l.HTTP.Compression; c != nil {
		for i, a := range c.Algorithms {
			filters = append(filters, typedHTTPFilter(compressorFilter(a), buildCompressor(c, a, i == 0)))
		}
	}
	return append(filters, routerHTTPFilter())
}

func typedHTTPFilter(name string, cfg proto.Message) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(cfg)}}
}

// listenerHTTPFeatures sets what a listener configures for all its routes
// on its HTTP connection manager.
func listenerHTTPFeatures(hcm *hcmv3.HttpConnectionManager, name string, h *ir.ListenerHTTP) {
	hcm.AccessLog = buildAccessLogs(name, h.AccessLogs)
	if t := h.Tracing; t != nil {
		hcm.Tracing = &hcmv3.HttpConnectionManager_Tracing{
			RandomSampling: &typev3.Percent{Value: t.SamplePercent},
			Provider: &tracev3.Tracing_Http{
				Name: "envoy.tracers.opentelemetry",
				ConfigType: &tracev3.Tracing_Http_TypedConfig{TypedConfig: mustAny(&tracev3.OpenTelemetryConfig{
					GrpcService: grpcCluster(t.Collector),
					ServiceName: t.ServiceName,
				})},
			},
		}
		hcm.PreserveExternalRequestId = t.PreserveRequestID
	}
	for _, u := range h.Upgrades {
		hcm.UpgradeConfigs = append(hcm.UpgradeConfigs, &hcmv3.HttpConnectionManager_UpgradeConfig{UpgradeType: u})
	}
}

// perFilterConfig adds the typed per-filter config of a virtual host's
// or route's settings to m (nil for none yet); nil when there is none.
func perFilterConfig(p *ir.PerRoute, m map[string]*anypb.Any) map[string]*anypb.Any {
	add := func(name string, cfg *anypb.Any) {
		if m == nil {
			m = map[string]*anypb.Any{}
		}
		m[name] = cfg
	}
	if c := p.CORS; c != nil {
		add(corsFilter, mustAny(buildCORS(c)))
	}
	if rl := p.RateLimit; rl != nil {
		add(localRateLimitFilter, mustAny(buildLocalRateLimit(rl)))
	}
	if p.JWT != nil {
		add(jwtAuthnFilter, mustAny(jwtPerRoute(p.JWT)))
	}
	if p.NoExtAuthz {
		// Harmless on a listener without ext_authz: Envoy ignores
		// config for filters it does not run.
		add(extAuthzFilter, mustAny(extAuthzOff()))
	}
	if p.NoCompression {
		// Every algorithm's filter: the route does not know which ones
		// its listener has, and Envoy ignores config for absent filters.
		off := mustAny(&compressorv3.CompressorPerRoute{Override: &compressorv3.CompressorPerRoute_Disabled{Disabled: true}})
		for _, a := range compressionAlgorithms {
			add(compressorFilter(a), off)
		}
	}
	return m
}

// routeHTTPFeatures sets a route's own HTTP settings on its action.
func routeHTTPFeatures(out *routev3.Route, p *ir.PerRoute) {
	// A route may enable an upgrade its listener does not: Envoy's
	// connection manager lets the route's upgrade_configs decide first
	// (HttpConnectionManagerConfig::createUpgradeFilterChain), so this
	// stays an RDS change.
	if a := out.GetRoute(); a != nil {
		a.RateLimits = globalRateLimits(p.GlobalRateLimits)
		for _, u := range p.Upgrades {
			a.UpgradeConfigs = append(a.UpgradeConfigs, &routev3.RouteAction_UpgradeConfig{UpgradeType: u, Enabled: wrapperspb.Bool(true)})
		}
	}
}

func buildCORS(c *ir.CORS) *corsv3.CorsPolicy {
	out := &corsv3.CorsPolicy{
		AllowMethods:  strings.Join(c.AllowMethods, ","),
		AllowHeaders:  strings.Join(c.AllowHeaders, ","),
		ExposeHeaders: strings.Join(c.ExposeHeaders, ","),
	}
	for _, o := range c.AllowOrigins {
		out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, exactMatcher(o))
	}
	for _, re := range c.AllowOriginRegex {
		out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}})
	}
	if c.MaxAge > 0 {
		out.MaxAge = strconv.FormatInt(int64(c.MaxAge.Seconds()), 10)
	}
	if c.AllowCredentials {
		out.AllowCredentials = wrapperspb.Bool(true)
	}
	return out
}

// buildLocalRateLimit is the local rate limit filter's config for rl, or
// an inert one (no bucket, enabled for no request) for nil. The
// descriptors' entries come from the filter's own rate_limits actions,
// one per distinct key, so no route action has to name them.
func buildLocalRateLimit(rl *ir.LocalRateLimit) *localratelimitv3.LocalRateLimit {
	out := &localratelimitv3.LocalRateLimit{StatPrefix: localRateLimitStats}
	if rl == nil {
		return out
	}
	all := &corev3.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED}}
	out.TokenBucket = tokenBucket(rl.Requests, rl.Interval, rl.Burst)
	out.FilterEnabled, out.FilterEnforced = all, all
	if rl.Status != 0 && rl.Status != 429 {
		out.Status = &typev3.HttpStatus{Code: typev3.StatusCode(rl.Status)}
	}
	for _, k := range slices.Sorted(maps.Keys(rl.ResponseHeaders)) {
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: k, Value: rl.ResponseHeaders[k]},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	if rl.RateLimitHeaders {
		out.EnableXRatelimitHeaders = ratelimitv3.XRateLimitHeadersRFCVersion_DRAFT_VERSION_03
	}
	var actions []string
	for i := range rl.Descriptors {
		d := &rl.Descriptors[i]
		out.Descriptors = append(out.Descriptors, &ratelimitv3.LocalRateLimitDescriptor{
			// An empty value is Envoy's wildcard: a bucket per distinct
			// value of the header (or address).
			Entries:     []*ratelimitv3.RateLimitDescriptor_Entry{{Key: d.Key(), Value: d.Value}},
			TokenBucket: tokenBucket(d.Requests, d.Interval, d.Burst),
		})
		if slices.Contains(actions, d.Key()) {
			continue
		}
		actions = append(actions, d.Key())
		a := &routev3.RateLimit_Action{}
		if d.ClientAddress {
			a.ActionSpecifier = &routev3.RateLimit_Action_RemoteAddress_{RemoteAddress: &routev3.RateLimit_Action_RemoteAddress{}}
		} else {
			a.ActionSpecifier = &routev3.RateLimit_Action_RequestHeaders_{RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{HeaderName: d.Header, DescriptorKey: d.Header}}
		}
		out.RateLimits = append(out.RateLimits, &routev3.RateLimit{Actions: []*routev3.RateLimit_Action{a}})
	}
	return out
}

func tokenBucket(requests uint32, interval time.Duration, burst uint32) *typev3.TokenBucket {
	return &typev3.TokenBucket{MaxTokens: burst, TokensPerFill: wrapperspb.UInt32(requests), FillInterval: durationpb.New(interval)}
}

// compressionAlgorithms are the compressor libraries of Envoy's
// compression extensions.
var compressionAlgorithms = []string{"gzip", "brotli", "zstd"}

// compressorFilter names the compressor filter of an algorithm; one
// listener may run several, one per algorithm.
func compressorFilter(algorithm string) string { return "envoy.filters.http.compressor." + algorithm }

// buildCompressor is the compressor filter of one algorithm; the first
// one listed is preferred when the client accepts several equally.
func buildCompressor(c *ir.Compression, algorithm string, first bool) *compressorv3.Compressor {
	var lib proto.Message
	switch algorithm {
	case "brotli":
		lib = &brotliv3.Brotli{}
	case "zstd":
		lib = &zstdv3.Zstd{}
	default:
		lib = &gzipv3.Gzip{}
	}
	common := &compressorv3.Compressor_CommonDirectionConfig{ContentType: c.ContentTypes}
	if c.MinLength > 0 {
		common.MinContentLength = wrapperspb.UInt32(c.MinLength)
	}
	return &compressorv3.Compressor{
		CompressorLibrary: &corev3.TypedExtensionConfig{
			Name:        "envoy.compression." + algorithm + ".compressor",
			TypedConfig: mustAny(lib),
		},
		ResponseDirectionConfig: &compressorv3.Compressor_ResponseDirectionConfig{CommonConfig: common},
		ChooseFirst:             first,
	}
}

// retryBudget is a circuit breaker's retry budget, nil for none.
func retryBudget(cb *ir.CircuitBreaker) *clusterv3.CircuitBreakers_Thresholds_RetryBudget {
	if cb.RetryBudgetPercent == 0 {
		return nil
	}
	return &clusterv3.CircuitBreakers_Thresholds_RetryBudget{
		BudgetPercent:       &typev3.Percent{Value: cb.RetryBudgetPercent},
		MinRetryConcurrency: wrapperspb.UInt32(cb.RetryBudgetMinConcurrency),
	}
}

// retryBackOff is a retry policy's back-off, nil for Envoy's default.
func retryBackOff(r *ir.Retry) *routev3.RetryPolicy_RetryBackOff {
	if r.BaseInterval == 0 {
		return nil
	}
	b := &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(r.BaseInterval)}
	if r.MaxInterval > 0 {
		b.MaxInterval = durationpb.New(r.MaxInterval)
	}
	return b
}
