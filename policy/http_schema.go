package policy

import "github.com/hashicorp/hcl/v2"

// The raw HTTP-feature blocks (http_features.go resolves them): each maps
// onto one Envoy HTTP filter or route setting.

// corsBlock is `cors` in a virtual_host or route: Envoy's CorsPolicy. A
// route's block inherits what it leaves out from its virtual host's.
type corsBlock struct {
	AllowOrigins     []string       `hcl:"allow_origins,optional"`
	AllowOriginRegex []string       `hcl:"allow_origin_regex,optional"`
	AllowMethods     []string       `hcl:"allow_methods,optional"`
	AllowHeaders     []string       `hcl:"allow_headers,optional"`
	ExposeHeaders    []string       `hcl:"expose_headers,optional"`
	MaxAge           hcl.Expression `hcl:"max_age,optional"`
	AllowCredentials *bool          `hcl:"allow_credentials,optional"`
	Body             hcl.Body       `hcl:",body"`
	DefRange         hcl.Range      `hcl:",def_range"`
}

// rateLimitBlock is `rate_limit` in a listener, virtual_host or route:
// Envoy's local rate limit filter, a token bucket per Envoy process. The
// most specific block applies, whole.
type rateLimitBlock struct {
	Requests         int                         `hcl:"requests"`
	Interval         hcl.Expression              `hcl:"interval,optional"`
	Burst            *int                        `hcl:"burst,optional"`
	Status           *int                        `hcl:"status,optional"`
	Headers          map[string]string           `hcl:"headers,optional"`
	RateLimitHeaders *bool                       `hcl:"rate_limit_headers,optional"`
	Descriptors      []*rateLimitDescriptorBlock `hcl:"descriptor,block"`
	Body             hcl.Body                    `hcl:",body"`
	DefRange         hcl.Range                   `hcl:",def_range"`
}

// rateLimitDescriptorBlock is a `descriptor` of a rate_limit: a bucket of
// its own, by request header or client address.
type rateLimitDescriptorBlock struct {
	Header        *string        `hcl:"header,optional"`
	ClientAddress *bool          `hcl:"client_address,optional"`
	Value         *string        `hcl:"value,optional"`
	Requests      int            `hcl:"requests"`
	Interval      hcl.Expression `hcl:"interval,optional"`
	Burst         *int           `hcl:"burst,optional"`
	Body          hcl.Body       `hcl:",body"`
	DefRange      hcl.Range      `hcl:",def_range"`
}

// compressionBlock is `compression` in a listener: one Envoy compressor
// filter per algorithm, for every route that does not set
// compression = false.
type compressionBlock struct {
	Algorithms   []string  `hcl:"algorithms,optional"`
	ContentTypes []string  `hcl:"content_types,optional"`
	MinLength    *int      `hcl:"min_length,optional"`
	Body         hcl.Body  `hcl:",body"`
	DefRange     hcl.Range `hcl:",def_range"`
}

// accessLogBlock is an `access_log` of a listener (several allowed): to
// a file or stdout, or to an OpenTelemetry collector that is a Consul
// service.
type accessLogBlock struct {
	Path          *string           `hcl:"path,optional"`
	Collector     *string           `hcl:"collector,optional"`
	Format        *string           `hcl:"format,optional"`
	JSON          map[string]string `hcl:"json,optional"`
	StatusClasses []string          `hcl:"status_classes,optional"`
	MinDuration   hcl.Expression    `hcl:"min_duration,optional"`
	SamplePercent *float64          `hcl:"sample_percent,optional"`
	Body          hcl.Body          `hcl:",body"`
	DefRange      hcl.Range         `hcl:",def_range"`
}

// retryBudgetBlock is `retry_budget` in a service's circuit_breaker:
// Envoy's retry budget, which replaces max_retries.
type retryBudgetBlock struct {
	Percent        *float64  `hcl:"percent,optional"`
	MinConcurrency *int      `hcl:"min_concurrency,optional"`
	Body           hcl.Body  `hcl:",body"`
	DefRange       hcl.Range `hcl:",def_range"`
}

// tracingBlock is `tracing` in a listener: OpenTelemetry spans to a
// collector that is a Consul service.
type tracingBlock struct {
	Collector         string    `hcl:"collector"`
	ServiceName       *string   `hcl:"service_name,optional"`
	SamplePercent     *float64  `hcl:"sample_percent,optional"`
	PreserveRequestID *bool     `hcl:"preserve_request_id,optional"`
	Body              hcl.Body  `hcl:",body"`
	DefRange          hcl.Range `hcl:",def_range"`
}

// extAuthzBlock is `ext_authz` in a listener: every request of the
// listener is checked by an authorization service (gRPC) that is a
// Consul service; a route opts out with ext_authz = false.
type extAuthzBlock struct {
	Service     string         `hcl:"service"`
	Timeout     hcl.Expression `hcl:"timeout,optional"`
	FailureMode *string        `hcl:"failure_mode,optional"`
	Headers     []string       `hcl:"headers,optional"`
	Body        hcl.Body       `hcl:",body"`
	DefRange    hcl.Range      `hcl:",def_range"`
}

// jwtProviderBlock is `jwt_provider "NAME"` in a listener: how Envoy's
// jwt_authn filter verifies one issuer's tokens. Routes and virtual hosts
// require a provider with a jwt block.
type jwtProviderBlock struct {
	Name                 string            `hcl:"name,label"`
	Issuer               string            `hcl:"issuer"`
	Audiences            []string          `hcl:"audiences,optional"`
	JWKSService          *string           `hcl:"jwks_service,optional"`
	JWKSURL              *string           `hcl:"jwks_url,optional"`
	JWKSFile             *string           `hcl:"jwks_file,optional"`
	CacheDuration        hcl.Expression    `hcl:"cache_duration,optional"`
	ForwardPayloadHeader *string           `hcl:"forward_payload_header,optional"`
	Forward              *bool             `hcl:"forward,optional"`
	ClaimHeaders         map[string]string `hcl:"claim_headers,optional"`
	Body                 hcl.Body          `hcl:",body"`
	DefRange             hcl.Range         `hcl:",def_range"`
}

// jwtBlock is `jwt` in a virtual_host or route: which provider's token
// it requires, or bypass = true to require none.
type jwtBlock struct {
	Provider     *string   `hcl:"provider,optional"`
	AllowMissing *bool     `hcl:"allow_missing,optional"`
	Bypass       *bool     `hcl:"bypass,optional"`
	Body         hcl.Body  `hcl:",body"`
	DefRange     hcl.Range `hcl:",def_range"`
}

// rateLimitServiceBlock is `rate_limit_service` in a listener: Envoy's
// global rate limit filter, asking a rate-limit service (a Consul
// service) about the descriptors routes choose.
type rateLimitServiceBlock struct {
	Service     string         `hcl:"service"`
	Domain      string         `hcl:"domain"`
	FailureMode *string        `hcl:"failure_mode,optional"`
	Timeout     hcl.Expression `hcl:"timeout,optional"`
	Body        hcl.Body       `hcl:",body"`
	DefRange    hcl.Range      `hcl:",def_range"`
}

// globalRateLimitBlock is `global_rate_limit` in a virtual_host or
// route: the descriptors sent to the listener's rate_limit_service.
type globalRateLimitBlock struct {
	Descriptors []*globalDescriptorBlock `hcl:"descriptor,block"`
	Body        hcl.Body                 `hcl:",body"`
	DefRange    hcl.Range                `hcl:",def_range"`
}

// globalDescriptorBlock is one descriptor, its entries in order.
type globalDescriptorBlock struct {
	Entries  []*globalEntryBlock `hcl:"entry,block"`
	Body     hcl.Body            `hcl:",body"`
	DefRange hcl.Range           `hcl:",def_range"`
}

// globalEntryBlock is an entry: header, client_address or generic_key.
type globalEntryBlock struct {
	Header        *string   `hcl:"header,optional"`
	ClientAddress *bool     `hcl:"client_address,optional"`
	GenericKey    *string   `hcl:"generic_key,optional"`
	Key           *string   `hcl:"key,optional"`
	Body          hcl.Body  `hcl:",body"`
	DefRange      hcl.Range `hcl:",def_range"`
}
