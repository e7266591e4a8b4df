package ir

import "time"

// HTTP features of listeners, virtual hosts and routes: each one is an
// Envoy HTTP filter (configured once per listener) or a route setting.
// Route and virtual host settings travel in RDS as typed per-filter
// config, so turning one on or off for a route never changes the
// listener, which Envoy would drain.

// PerRoute is what a virtual host or a route sets for the HTTP filters of
// its listener. A route's settings override its virtual host's, which
// override the listener's; the policy resolves inheritance, so each
// value here is complete.
type PerRoute struct {
	// CORS answers preflight requests and adds the CORS response headers.
	CORS *CORS
	// RateLimit is a local token bucket for the requests of this route
	// (or virtual host): one bucket per Envoy process.
	RateLimit *LocalRateLimit
	// Upgrades lists the connection upgrades (e.g. "websocket") the route
	// allows; routes only (Envoy has no virtual host setting).
	Upgrades []string
	// NoCompression turns the listener's compression off for the route.
	NoCompression bool
	// NoExtAuthz skips the listener's external authorization for the
	// route.
	NoExtAuthz bool
	// JWT is what the route (or virtual host) requires of a request's
	// JSON Web Token; nil requires nothing (or inherits).
	JWT *JWTRule
	// GlobalRateLimits are the descriptors sent to the listener's
	// rate-limit service for each request (route action or virtual host
	// rate_limits); a route's replace its virtual host's.
	GlobalRateLimits []GlobalDescriptor
}

// GlobalDescriptor is one descriptor sent to the rate-limit service: its
// entries in order. A request that lacks one entry's header sends no
// such descriptor.
type GlobalDescriptor struct {
	Entries []GlobalEntry
}

// GlobalEntry is one entry of a descriptor, exactly one kind: a request
// header's value under Key, the client's address ("remote_address"), or
// a fixed GenericKey (under Key, "generic_key" by default).
type GlobalEntry struct {
	Header        string
	ClientAddress bool
	GenericKey    string
	Key           string
}

// JWTRule requires a token from one of the listener's providers, or
// bypasses a virtual host's requirement.
type JWTRule struct {
	// Provider names the listener's JWT provider whose token is required.
	Provider string
	// AllowMissing lets requests without a token through (a token that
	// is present must still verify).
	AllowMissing bool
	// Bypass skips JWT authentication for the route.
	Bypass bool
}

// IsZero reports whether p sets nothing.
func (p PerRoute) IsZero() bool {
	return p.CORS == nil && p.RateLimit == nil && len(p.Upgrades) == 0 && !p.NoCompression && !p.NoExtAuthz && p.JWT == nil && len(p.GlobalRateLimits) == 0
}

// CORS is Envoy's CorsPolicy: which origins may call, with what.
type CORS struct {
	// AllowOrigins match the Origin header exactly ("*" matches any);
	// AllowOriginRegex as RE2 patterns.
	AllowOrigins     []string
	AllowOriginRegex []string
	AllowMethods     []string
	AllowHeaders     []string
	ExposeHeaders    []string
	// MaxAge is how long a browser may cache a preflight answer; 0 sends
	// no Access-Control-Max-Age.
	MaxAge           time.Duration
	AllowCredentials bool
}

// LocalRateLimit is Envoy's local (per process) token bucket. Each
// request takes a token; with none left Envoy answers Status itself.
type LocalRateLimit struct {
	// Requests tokens are added every Interval, up to Burst.
	Requests uint32
	Interval time.Duration
	Burst    uint32
	// Status answers a limited request (429 by default).
	Status int
	// ResponseHeaders are added to limited responses.
	ResponseHeaders map[string]string
	// RateLimitHeaders sends X-RateLimit-Limit, -Remaining and -Reset
	// (draft-polli-ratelimit-headers-03) on every response.
	RateLimitHeaders bool
	// Descriptors are buckets of their own for requests with a header or
	// from a client address; a request that matches one takes its token
	// there, besides the default bucket.
	Descriptors []RateLimitDescriptor
}

// RateLimitDescriptor is a bucket selected by a request property.
type RateLimitDescriptor struct {
	// Header names a request header, or ClientAddress selects by the
	// client's address (the downstream remote address).
	Header        string
	ClientAddress bool
	// Value limits the bucket to one value of the header or address;
	// "" gives each distinct value a bucket of its own.
	Value    string
	Requests uint32
	Interval time.Duration
	Burst    uint32
}

// Key is the descriptor entry's key: the header name, or
// "remote_address" (Envoy's key for the client address action).
func (d *RateLimitDescriptor) Key() string {
	if d.ClientAddress {
		return "remote_address"
	}
	return d.Header
}

// ListenerHTTP is what an HTTP listener sets for all its routes.
type ListenerHTTP struct {
	// Upgrades allowed on every route (HCM upgrade_configs).
	Upgrades []string
	// RateLimit is a token bucket for every request of the listener that
	// a virtual host or route does not limit otherwise.
	RateLimit   *LocalRateLimit
	Compression *Compression
	AccessLogs  []AccessLog
	Tracing     *Tracing
	// JWTProviders verify the JSON Web Tokens that routes require, in
	// the order declared.
	JWTProviders []JWTProvider
	// RateLimitService is the global rate limit filter's service; routes
	// choose the descriptors.
	RateLimitService *RateLimitService
	// ExtAuthz asks an authorization service about every request of the
	// listener that a route does not exempt.
	ExtAuthz *ExtAuthz
}

// ExtAuthz is Envoy's external authorization filter calling a gRPC
// service (envoy.service.auth.v3.Authorization).
type ExtAuthz struct {
	// Service is the authorization service's cluster.
	Service string
	// Timeout bounds each check; 0 keeps Envoy's (200ms).
	Timeout time.Duration
	// FailureModeAllow lets requests through when the service cannot
	// answer (errors, timeouts); otherwise Envoy answers 403.
	FailureModeAllow bool
	// Headers are the request headers sent to the service (lower case);
	// empty sends all.
	Headers []string
}

// Compression compresses responses with the first algorithm the client
// accepts, in the order given.
type Compression struct {
	// Algorithms are "gzip", "brotli" and "zstd".
	Algorithms []string
	// ContentTypes are compressed; empty keeps Envoy's default list.
	ContentTypes []string
	// MinLength is the smallest response (bytes) compressed; 0 keeps
	// Envoy's default (30).
	MinLength uint32
}

// AccessLog is one access log of an HTTP listener.
type AccessLog struct {
	// Exactly one sink: Path (a file, "/dev/stdout" for standard
	// output) or Collector, the cluster of an OpenTelemetry collector
	// (OTLP logs over gRPC).
	Path      string
	Collector string
	// Format is a command-operator format string; JSON a JSON object of
	// them. Neither: Envoy's default format.
	Format string
	JSON   map[string]string
	// Only requests that pass every filter are logged: a response status
	// in one of StatusClasses ("4xx", "5xx"), lasting at least
	// MinDuration, and a SamplePercent share of them (100: all).
	StatusClasses []string
	MinDuration   time.Duration
	SamplePercent float64
}

// Tracing sends spans to an OpenTelemetry collector (OTLP over gRPC).
type Tracing struct {
	// Collector is the collector's cluster.
	Collector string
	// ServiceName names the proxies in their spans.
	ServiceName string
	// SamplePercent of requests without a sampling decision are traced.
	SamplePercent float64
	// PreserveRequestID keeps a request's own x-request-id (from a
	// trusted edge in front) instead of Envoy's.
	PreserveRequestID bool
}

// JWTProvider verifies tokens of one issuer against its key set (JWKS).
type JWTProvider struct {
	Name   string
	Issuer string
	// Audiences, if any, must include the token's aud.
	Audiences []string
	// Exactly one key set: JWKSCluster (the cluster Envoy fetches JWKSURI
	// from, caching it CacheDuration, 0 for Envoy's default, 10m) or LocalJWKS (the
	// key set itself, read by the bridge from a file).
	JWKSCluster   string
	JWKSURI       string
	CacheDuration time.Duration
	LocalJWKS     string
	// ForwardPayloadHeader, if set, receives the verified payload
	// (base64url) for the upstream.
	ForwardPayloadHeader string
	// Forward keeps the token in the request to the upstream.
	Forward bool
	// ClaimHeaders copies claims (by name) into request headers.
	ClaimHeaders map[string]string
}

// RateLimitService is a rate-limit service (the envoyproxy/ratelimit gRPC
// API, envoy.service.ratelimit.v3) shared by every Envoy of a group.
type RateLimitService struct {
	// Service is its cluster; Domain the configuration it applies.
	Service string
	Domain  string
	// FailureModeDeny answers 500 when the service cannot answer;
	// otherwise requests pass (Envoy's default).
	FailureModeDeny bool
	// Timeout bounds each call; 0 keeps Envoy's (20ms).
	Timeout time.Duration
}
