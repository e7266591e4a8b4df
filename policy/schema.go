package policy

import (
	"github.com/hashicorp/hcl/v2"
)

// The raw routing-policy blocks as gohcl decodes them. Attributes that need
// checking beyond their type keep their body so diagnostics can point at the
// exact value (see valueRange).

type serviceBlock struct {
	Name             string               `hcl:"name,label"`
	ConsulName       *string              `hcl:"consul_service,optional"`
	Datacenter       *string              `hcl:"datacenter,optional"`
	ConnectTimeout   hcl.Expression       `hcl:"connect_timeout,optional"`
	LBPolicy         *string              `hcl:"lb_policy,optional"`
	HashPolicies     []*hashPolicyBlock   `hcl:"hash_policy,block"`
	OnlyPassing      *bool                `hcl:"only_passing,optional"`
	HTTP2            *bool                `hcl:"http2,optional"`
	Subsets          []*subsetBlock       `hcl:"subset,block"`
	CircuitBreaker   *circuitBreakerBlock `hcl:"circuit_breaker,block"`
	OutlierDetection *outlierBlock        `hcl:"outlier_detection,block"`
	HealthCheck      *healthCheckBlock    `hcl:"health_check,block"`
	TLS              *tlsBlock            `hcl:"tls,block"`
	Failover         *failoverBlock       `hcl:"failover,block"`
	ZoneAware        *zoneAwareBlock      `hcl:"zone_aware,block"`
	Body             hcl.Body             `hcl:",body"`
	DefRange         hcl.Range            `hcl:",def_range"`
}

type hashPolicyBlock struct {
	Header   *string   `hcl:"header,optional"`
	Cookie   *string   `hcl:"cookie,optional"`
	SourceIP *bool     `hcl:"source_ip,optional"`
	Terminal *bool     `hcl:"terminal,optional"`
	Body     hcl.Body  `hcl:",body"`
	DefRange hcl.Range `hcl:",def_range"`
}

type subsetBlock struct {
	Name string            `hcl:"name,label"`
	Tags []string          `hcl:"tags,optional"`
	Meta map[string]string `hcl:"meta,optional"`
	// Failover is this subset's own (Consul's Failover["SUBSET"]); the
	// service's failover block is for every other subset ("*").
	Failover *failoverBlock `hcl:"failover,block"`
	DefRange hcl.Range      `hcl:",def_range"`
}

type circuitBreakerBlock struct {
	MaxConnections     *int              `hcl:"max_connections,optional"`
	MaxPendingRequests *int              `hcl:"max_pending_requests,optional"`
	MaxRequests        *int              `hcl:"max_requests,optional"`
	MaxRetries         *int              `hcl:"max_retries,optional"`
	RetryBudget        *retryBudgetBlock `hcl:"retry_budget,block"`
	Body               hcl.Body          `hcl:",body"`
	DefRange           hcl.Range         `hcl:",def_range"`
}

type zoneAwareBlock struct {
	MinClusterSize *int      `hcl:"min_cluster_size,optional"`
	RoutingPercent *float64  `hcl:"routing_percent,optional"`
	Body           hcl.Body  `hcl:",body"`
	DefRange       hcl.Range `hcl:",def_range"`
}

type outlierBlock struct {
	Consecutive5xx     *int           `hcl:"consecutive_5xx,optional"`
	Interval           hcl.Expression `hcl:"interval,optional"`
	BaseEjectionTime   hcl.Expression `hcl:"base_ejection_time,optional"`
	MaxEjectionPercent *int           `hcl:"max_ejection_percent,optional"`
	Body               hcl.Body       `hcl:",body"`
	DefRange           hcl.Range      `hcl:",def_range"`
}

type healthCheckBlock struct {
	Path               *string        `hcl:"path,optional"`
	Host               *string        `hcl:"host,optional"`
	Interval           hcl.Expression `hcl:"interval,optional"`
	Timeout            hcl.Expression `hcl:"timeout,optional"`
	HealthyThreshold   *int           `hcl:"healthy_threshold,optional"`
	UnhealthyThreshold *int           `hcl:"unhealthy_threshold,optional"`
	Body               hcl.Body       `hcl:",body"`
	DefRange           hcl.Range      `hcl:",def_range"`
}

type tlsBlock struct {
	SNI      *string   `hcl:"sni,optional"`
	CAFile   *string   `hcl:"ca_file,optional"`
	CertFile *string   `hcl:"cert_file,optional"`
	KeyFile  *string   `hcl:"key_file,optional"`
	Body     hcl.Body  `hcl:",body"`
	DefRange hcl.Range `hcl:",def_range"`
}

type failoverBlock struct {
	Datacenters []string               `hcl:"datacenters,optional"`
	Service     *string                `hcl:"service,optional"`
	Subset      *string                `hcl:"subset,optional"`
	Targets     []*failoverTargetBlock `hcl:"target,block"`
	Body        hcl.Body               `hcl:",body"`
	DefRange    hcl.Range              `hcl:",def_range"`
}

type failoverTargetBlock struct {
	Service    *string   `hcl:"service,optional"`
	Subset     *string   `hcl:"subset,optional"`
	Datacenter *string   `hcl:"datacenter,optional"`
	Body       hcl.Body  `hcl:",body"`
	DefRange   hcl.Range `hcl:",def_range"`
}

type proxyBlock struct {
	Name      string `hcl:"name,label"`
	Proxyless *bool  `hcl:"proxyless,optional"`
	// Upstreams are services the group's proxies dial without a route
	// (proxyless groups: the xDS target names they dial).
	Upstreams         []string `hcl:"upstreams,optional"`
	ExportAllServices *bool    `hcl:"export_all_services,optional"`
	// LocalService is the service the group's proxies belong to: its
	// endpoints are what zone aware routing weighs zones by.
	LocalService *string `hcl:"local_service,optional"`
	// SidecarFor makes the group's Envoys SERVICE's Connect sidecar.
	SidecarFor *string          `hcl:"sidecar_for,optional"`
	Listeners  []*listenerBlock `hcl:"listener,block"`
	Body       hcl.Body         `hcl:",body"`
	DefRange   hcl.Range        `hcl:",def_range"`
}

// grpcServiceBlock is `grpc_service "NAME"`: the routes proxyless gRPC
// clients dialing xds:///NAME get.
type grpcServiceBlock struct {
	Name     string        `hcl:"name,label"`
	Routes   []*routeBlock `hcl:"route,block"`
	DefRange hcl.Range     `hcl:",def_range"`
}

type listenerBlock struct {
	Name         string                 `hcl:"name,label"`
	Address      *string                `hcl:"address,optional"`
	Port         int                    `hcl:"port"`
	Protocol     *string                `hcl:"protocol,optional"`
	Service      *string                `hcl:"service,optional"`
	Subset       *string                `hcl:"subset,optional"`
	Splits       []*splitBlock          `hcl:"split,block"`
	IdleTimeout  hcl.Expression         `hcl:"idle_timeout,optional"`
	VirtualHosts []*virtualHostBlock    `hcl:"virtual_host,block"`
	TLS          *listenerTLSBlock      `hcl:"tls,block"`
	TagRoutes    *tagRoutesBlock        `hcl:"tag_routes,block"`
	Upgrades     []string               `hcl:"upgrades,optional"`
	RateLimit    *rateLimitBlock        `hcl:"rate_limit,block"`
	Compression  *compressionBlock      `hcl:"compression,block"`
	AccessLogs   []*accessLogBlock      `hcl:"access_log,block"`
	Tracing      *tracingBlock          `hcl:"tracing,block"`
	ExtAuthz     *extAuthzBlock         `hcl:"ext_authz,block"`
	JWTProviders []*jwtProviderBlock    `hcl:"jwt_provider,block"`
	RateLimitSvc *rateLimitServiceBlock `hcl:"rate_limit_service,block"`
	Body         hcl.Body               `hcl:",body"`
	DefRange     hcl.Range              `hcl:",def_range"`
}

// tagRoutesBlock makes a listener also serve the routes services declare
// in their Consul tags (package tagroute).
type tagRoutesBlock struct {
	Format string `hcl:"format"`
	// Owners: host, "*" or "/PATH" -> the services whose tags may route it.
	Owners   map[string][]string `hcl:"owners,optional"`
	Body     hcl.Body            `hcl:",body"`
	DefRange hcl.Range           `hcl:",def_range"`
}

// listenerTLSBlock is a listener's `tls` block: TLS terminated by Envoy
// with certificates the bridge reads and serves over SDS.
type listenerTLSBlock struct {
	Certificates       []*certificateBlock `hcl:"certificate,block"`
	DefaultCertificate *string             `hcl:"default_certificate,optional"`
	MinVersion         *string             `hcl:"min_version,optional"`
	MaxVersion         *string             `hcl:"max_version,optional"`
	ALPN               []string            `hcl:"alpn,optional"`
	ClientCAFile       *string             `hcl:"client_ca_file,optional"`
	Body               hcl.Body            `hcl:",body"`
	DefRange           hcl.Range           `hcl:",def_range"`
}

// certificateBlock is `certificate "NAME"` in a listener's tls block.
type certificateBlock struct {
	Name     string    `hcl:"name,label"`
	CertFile string    `hcl:"cert_file"`
	KeyFile  string    `hcl:"key_file"`
	Body     hcl.Body  `hcl:",body"`
	DefRange hcl.Range `hcl:",def_range"`
}

// vhostTLSBlock is a virtual host's `tls` block: which of its listener's
// certificates clients asking for the virtual host's domains get (SNI).
type vhostTLSBlock struct {
	Certificate string    `hcl:"certificate"`
	Body        hcl.Body  `hcl:",body"`
	DefRange    hcl.Range `hcl:",def_range"`
}

type virtualHostBlock struct {
	Name      string                `hcl:"name,label"`
	Domains   []string              `hcl:"domains,optional"`
	Routes    []*routeBlock         `hcl:"route,block"`
	TLS       *vhostTLSBlock        `hcl:"tls,block"`
	CORS      *corsBlock            `hcl:"cors,block"`
	RateLimit *rateLimitBlock       `hcl:"rate_limit,block"`
	JWT       *jwtBlock             `hcl:"jwt,block"`
	GlobalRL  *globalRateLimitBlock `hcl:"global_rate_limit,block"`
	Body      hcl.Body              `hcl:",body"`
	DefRange  hcl.Range             `hcl:",def_range"`
}

type routeBlock struct {
	Match           *matchBlock           `hcl:"match,block"`
	Service         *string               `hcl:"service,optional"`
	Subset          *string               `hcl:"subset,optional"`
	Splits          []*splitBlock         `hcl:"split,block"`
	Redirect        *redirectBlock        `hcl:"redirect,block"`
	DirectResponse  *directResponseBlock  `hcl:"direct_response,block"`
	Timeout         hcl.Expression        `hcl:"timeout,optional"`
	IdleTimeout     hcl.Expression        `hcl:"idle_timeout,optional"`
	Retry           *retryBlock           `hcl:"retry,block"`
	Rewrite         *rewriteBlock         `hcl:"rewrite,block"`
	RequestHeaders  *headersBlock         `hcl:"request_headers,block"`
	ResponseHeaders *headersBlock         `hcl:"response_headers,block"`
	Mirror          *mirrorBlock          `hcl:"mirror,block"`
	Fault           *faultBlock           `hcl:"fault,block"`
	CORS            *corsBlock            `hcl:"cors,block"`
	Upgrades        []string              `hcl:"upgrades,optional"`
	RateLimit       *rateLimitBlock       `hcl:"rate_limit,block"`
	Compression     *bool                 `hcl:"compression,optional"`
	ExtAuthz        *bool                 `hcl:"ext_authz,optional"`
	JWT             *jwtBlock             `hcl:"jwt,block"`
	GlobalRL        *globalRateLimitBlock `hcl:"global_rate_limit,block"`
	// Chain false keeps a route to a service with a discovery chain (a
	// chain block) as written: every instance, no router or splitter.
	Chain    *bool     `hcl:"chain,optional"`
	Body     hcl.Body  `hcl:",body"`
	DefRange hcl.Range `hcl:",def_range"`
}

type matchBlock struct {
	PathPrefix    *string         `hcl:"path_prefix,optional"`
	Path          *string         `hcl:"path,optional"`
	PathRegex     *string         `hcl:"path_regex,optional"`
	CaseSensitive *bool           `hcl:"case_sensitive,optional"`
	Method        *string         `hcl:"method,optional"`
	Headers       []*valueMatcher `hcl:"header,block"`
	Query         []*valueMatcher `hcl:"query,block"`
	Body          hcl.Body        `hcl:",body"`
	DefRange      hcl.Range       `hcl:",def_range"`
}

// valueMatcher is a header or query-parameter match.
type valueMatcher struct {
	Name     string    `hcl:"name,label"`
	Exact    *string   `hcl:"exact,optional"`
	Prefix   *string   `hcl:"prefix,optional"`
	Regex    *string   `hcl:"regex,optional"`
	Present  *bool     `hcl:"present,optional"`
	Invert   *bool     `hcl:"invert,optional"`
	Body     hcl.Body  `hcl:",body"`
	DefRange hcl.Range `hcl:",def_range"`
}

type splitBlock struct {
	Service  string    `hcl:"service"`
	Subset   *string   `hcl:"subset,optional"`
	Weight   int       `hcl:"weight"`
	Body     hcl.Body  `hcl:",body"`
	DefRange hcl.Range `hcl:",def_range"`
}

type redirectBlock struct {
	Scheme     *string   `hcl:"scheme,optional"`
	Host       *string   `hcl:"host,optional"`
	Port       *int      `hcl:"port,optional"`
	Path       *string   `hcl:"path,optional"`
	Prefix     *string   `hcl:"prefix,optional"`
	Status     *int      `hcl:"status,optional"`
	StripQuery *bool     `hcl:"strip_query,optional"`
	Body       hcl.Body  `hcl:",body"`
	DefRange   hcl.Range `hcl:",def_range"`
}

type directResponseBlock struct {
	Status   int       `hcl:"status"`
	Body     *string   `hcl:"body,optional"`
	HCLBody  hcl.Body  `hcl:",body"`
	DefRange hcl.Range `hcl:",def_range"`
}

type retryBlock struct {
	Attempts      *int           `hcl:"attempts,optional"`
	PerTryTimeout hcl.Expression `hcl:"per_try_timeout,optional"`
	On            []string       `hcl:"on,optional"`
	BaseInterval  hcl.Expression `hcl:"base_interval,optional"`
	MaxInterval   hcl.Expression `hcl:"max_interval,optional"`
	Body          hcl.Body       `hcl:",body"`
	DefRange      hcl.Range      `hcl:",def_range"`
}

type rewriteBlock struct {
	Prefix       *string   `hcl:"prefix,optional"`
	Regex        *string   `hcl:"regex,optional"`
	Substitution *string   `hcl:"substitution,optional"`
	Host         *string   `hcl:"host,optional"`
	Body         hcl.Body  `hcl:",body"`
	DefRange     hcl.Range `hcl:",def_range"`
}

type headersBlock struct {
	Add      map[string]string `hcl:"add,optional"`
	Set      map[string]string `hcl:"set,optional"`
	Remove   []string          `hcl:"remove,optional"`
	Body     hcl.Body          `hcl:",body"`
	DefRange hcl.Range         `hcl:",def_range"`
}

type mirrorBlock struct {
	Service  string    `hcl:"service"`
	Subset   *string   `hcl:"subset,optional"`
	Percent  *float64  `hcl:"percent,optional"`
	Body     hcl.Body  `hcl:",body"`
	DefRange hcl.Range `hcl:",def_range"`
}

type faultBlock struct {
	Delay    *faultDelayBlock `hcl:"delay,block"`
	Abort    *faultAbortBlock `hcl:"abort,block"`
	DefRange hcl.Range        `hcl:",def_range"`
}

type faultDelayBlock struct {
	Duration hcl.Expression `hcl:"duration"`
	Percent  *float64       `hcl:"percent,optional"`
	Body     hcl.Body       `hcl:",body"`
	DefRange hcl.Range      `hcl:",def_range"`
}

type faultAbortBlock struct {
	Status   int       `hcl:"status"`
	Percent  *float64  `hcl:"percent,optional"`
	Body     hcl.Body  `hcl:",body"`
	DefRange hcl.Range `hcl:",def_range"`
}
