package ir

import "time"

// Listener is one Envoy listener of a proxy group, named "<group>.<name>".
type Listener struct {
	Name    string
	Address string
	Port    uint32
	// Protocol is "http" (HTTP connection manager with RDS named like the
	// listener) or "tcp" (tcp_proxy to TCP clusters).
	Protocol string
	// IdleTimeout for tcp listeners; 0 keeps Envoy's default.
	IdleTimeout time.Duration
	// TCP targets, for protocol tcp.
	TCP []WeightedCluster
	// Routes, for protocol http: the RouteConfiguration of the same name.
	VirtualHosts []VirtualHost
	// UsesFault is set when any route configures fault injection, so the
	// HTTP fault filter is installed before the router.
	UsesFault bool
	// TLS, if set, terminates TLS on the listener (any protocol).
	TLS *DownstreamTLS
	// HTTP holds the listener's HTTP features (http.go).
	HTTP ListenerHTTP `json:",omitzero"`
}

// VirtualHost groups routes by the Host header.
type VirtualHost struct {
	Name    string
	Domains []string
	Routes  []Route
	// HTTP is the virtual host's HTTP filter settings (http.go).
	HTTP PerRoute `json:",omitzero"`
}

// NoTimeout, as a route's Timeout or IdleTimeout, disables the timeout;
// zero keeps Envoy's default.
const NoTimeout time.Duration = -1

// Route is one match and what to do with matching requests.
type Route struct {
	// Name identifies the route in its route configuration: its virtual
	// host and position ("shop/0"). It never holds the source location, so
	// a comment line added to a policy, or the same policy read from
	// another path or from KV, serves the same resources.
	Name string
	// Source is where the route is declared ("file:line"), shown to
	// operators in config dumps and route tests.
	Source string
	Match  RouteMatch

	// Exactly one action: Clusters (one, or weighted), Redirect or
	// DirectResponse.
	Clusters       []WeightedCluster
	Redirect       *Redirect
	DirectResponse *DirectResponse

	Timeout         time.Duration
	IdleTimeout     time.Duration
	Retry           *Retry
	Rewrite         *Rewrite
	RequestHeaders  HeaderMutation
	ResponseHeaders HeaderMutation
	Mirror          *Mirror
	Fault           *Fault
	// HashPolicies come from the target service's ring-hash settings.
	HashPolicies []HashPolicy
	// HTTP is the route's HTTP filter settings (http.go).
	HTTP PerRoute `json:",omitzero"`
}

// RouteMatch selects requests. At most one path matcher is set; none
// means prefix "/".
type RouteMatch struct {
	PathPrefix    string
	Path          string
	PathRegex     string
	CaseSensitive bool
	Method        string
	Headers       []ValueMatch
	Query         []ValueMatch
}

// ValueMatch matches a header or query parameter by name. Exactly one of
// Exact, Prefix, Regex or Present applies.
type ValueMatch struct {
	Name    string
	Exact   string
	Prefix  string
	Regex   string
	Present bool
	Invert  bool
}

// WeightedCluster is a cluster and its share of traffic.
type WeightedCluster struct {
	Name   string
	Weight uint32
}

// Redirect answers with an HTTP redirect. Empty fields keep the request's.
type Redirect struct {
	Scheme     string
	Host       string
	Port       uint32
	Path       string
	Prefix     string
	Status     int
	StripQuery bool
}

// DirectResponse answers with a fixed status and body.
type DirectResponse struct {
	Status int
	Body   string
}

// Retry policy of a route.
type Retry struct {
	Attempts      uint32
	PerTryTimeout time.Duration
	On            []string
	// BaseInterval and MaxInterval bound the jittered exponential back-off
	// between attempts; zero keeps Envoy's (25ms, 10 times the base).
	BaseInterval time.Duration `json:",omitzero"`
	MaxInterval  time.Duration `json:",omitzero"`
}

// Rewrite changes the path or host before forwarding.
type Rewrite struct {
	Prefix       string
	Regex        string
	Substitution string
	Host         string
}

// HeaderMutation adds, sets (overwrites) and removes headers.
type HeaderMutation struct {
	Add    map[string]string
	Set    map[string]string
	Remove []string
}

// Mirror copies a share of requests to another cluster.
type Mirror struct {
	Cluster string
	Percent float64
}

// Fault injects delays or aborts into a share of requests.
type Fault struct {
	Delay        time.Duration
	DelayPercent float64
	AbortStatus  int
	AbortPercent float64
}

// HashPolicy feeds the ring-hash load balancer.
type HashPolicy struct {
	Header   string
	Cookie   string
	SourceIP bool
	Terminal bool
}

// CircuitBreaker thresholds; zero keeps Envoy's default.
type CircuitBreaker struct {
	MaxConnections     uint32
	MaxPendingRequests uint32
	MaxRequests        uint32
	MaxRetries         uint32
	// RetryBudgetPercent, if not 0, replaces MaxRetries with Envoy's
	// retry_budget: retries in flight may be this share of the requests
	// in flight, but RetryBudgetMinConcurrency retries are always
	// allowed. Plain values, so that the struct stays comparable.
	RetryBudgetPercent        float64 `json:",omitzero"`
	RetryBudgetMinConcurrency uint32  `json:",omitzero"`
}

// OutlierDetection ejects hosts that keep failing.
type OutlierDetection struct {
	Consecutive5xx     uint32
	Interval           time.Duration
	BaseEjectionTime   time.Duration
	MaxEjectionPercent uint32
}

// HealthCheck is an active HTTP health check run by Envoy itself.
type HealthCheck struct {
	Path               string
	Host               string
	Interval           time.Duration
	Timeout            time.Duration
	HealthyThreshold   uint32
	UnhealthyThreshold uint32
}

// UpstreamTLS originates TLS to a cluster's endpoints. Certificates are
// SDS secrets (see Secret), referred to by name.
type UpstreamTLS struct {
	SNI string
	// CertificateSecret is the client certificate's secret, "" for none.
	CertificateSecret string
	// CASecret holds the CA certificates the upstream's certificate must
	// chain to, "" to skip verification.
	CASecret string
	// MatchURISANs, if set, are the URI SANs of which the upstream's
	// certificate must carry one (a mesh peer's SPIFFE id: one per
	// datacenter the cluster fails over to), checked besides the chain.
	MatchURISANs []string `json:",omitempty"`
	// CertificateProvider, if set, is the gRPC certificate provider
	// instance (the gRPC bootstrap's certificate_providers) holding the
	// client certificate and the CA, instead of CertificateSecret and
	// CASecret: proxyless gRPC has no SDS (meshgrpc.go).
	CertificateProvider string `json:",omitempty"`
	// Files, if set, are PEM files on the proxy's own host instead of
	// SDS secrets (a terminating gateway's link to an external service,
	// as its config entry names them): no key travels.
	Files *TLSFiles `json:",omitempty"`
}

// TLSFiles are paths on a proxy's host: CA verifies the peer (required:
// without a CA file Consul originates no TLS, and neither does the
// model), Cert and Key are presented only together.
type TLSFiles struct {
	CA, Cert, Key string
}
