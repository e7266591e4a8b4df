package envoycompat

// The features the translator uses that some supported Envoys lack, and
// the first release certain to have each.
//
// Where they come from: the Go types of Envoy's API that go-control-plane
// publishes, compared release by release (each version's .pb.go files,
// fetched with `go mod download`):
//
//   - go-control-plane v0.10.2-0.20220325020618-49ff273808a1: the API
//     Consul 1.15.4 was built with, cut 2022-03-25, just before Envoy
//     1.22.0 (2022-04-15): what internal/envoyapi122 checks against.
//   - v0.10.3 (published 2022-06-28, before Envoy 1.23.0 of 2022-07-15):
//     the first with the OpenTelemetry tracer (config.trace.v3.
//     OpenTelemetryConfig), the zstd compressor and the least_request
//     load-balancing policy type. Absent from the reference above, they
//     may have landed in 1.22 or 1.23: 1.23 is the first release certain
//     to have them.
//   - v0.11.0 (published 2023-01-30, after Envoy 1.25.0 of 2023-01-18):
//     the first with jwt_authn's claim_to_headers, CompressorPerRoute,
//     the compressor's choose_first, the CORS filter's per-route
//     CorsPolicy (typed_per_filter_config) and ext_authz's allowed_headers
//     (field 17). Absent from v0.10.3, they landed in 1.24, 1.25 or 1.26's
//     development: 1.26 is the first release certain to have them (a 1.24
//     or 1.25 Envoy is served the older form, which it also accepts, or
//     loses the feature: the safe side).
//   - v0.12.0 (2024-01-02, before Envoy 1.29.0 of 2024-01-16) lacks,
//     v0.13.0 (2024-08-09, after Envoy 1.31.0) has the OpenTelemetry
//     access logger's stat_prefix (field 6): 1.31 is the first release
//     certain to have it. No older equivalent: its statistics go
//     unprefixed.
//   - v0.13.0 lacks, envoy/v1.32.3 (2025-01-03, just before Envoy 1.33.0
//     of 2025-01-14) has the local rate limit's own rate_limits (field
//     17), which fill its descriptors: 1.33. Before, only a route's
//     rate_limits could, shared with the global rate limit filter, so
//     descriptor buckets are left out (the route's bucket still limits).
//   - envoy/v1.32.3 (2025-01-03) lacks, envoy/v1.35.0 (2025-07-22) has
//     the local rate limit's dynamic descriptors (max_dynamic_descriptors:
//     a descriptor entry without a value is a bucket per distinct value,
//     i.e. per client). Envoy 1.33 and 1.34 came out between the two and
//     v1.35.0 carries 1.35's API: it may be 1.33's, 1.34's or 1.35's, and
//     1.35 is the first release certain to have it (it is often said
//     to be 1.34's; a 1.34 Envoy then loses per-client buckets it has,
//     the safe side). Before, an entry without a value matches only an
//     empty value: the per-client limit would silently limit nothing.
//   - envoy/v1.36.0 (2025-10-13) lacks, envoy/v1.37.0 (2026-01-13) has
//     the OpenTelemetry access logger's own grpc_service and log_name
//     (fields 9 and 10); before, they live in common_config, which
//     every supported Envoy still reads.
type feature int

const (
	otelTracer feature = iota
	zstdCompressor
	lbPolicyExtensions
	jwtClaimToHeaders
	compressorPerRoute
	compressorChooseFirst
	corsPerFilter
	extAuthzAllowedHeaders
	otelLogStatPrefix
	localRateLimitDescriptors
	localRateLimitPerClient
	otelLogTopLevel
)

var features = []struct {
	since Version
	name  string
}{
	otelTracer:                {Version{1, 23}, "OpenTelemetry tracer"},
	zstdCompressor:            {Version{1, 23}, "zstd compressor"},
	lbPolicyExtensions:        {Version{1, 23}, "cluster load_balancing_policy"},
	jwtClaimToHeaders:         {Version{1, 26}, "JWT claim_to_headers"},
	compressorPerRoute:        {Version{1, 26}, "per-route compression off (CompressorPerRoute)"},
	compressorChooseFirst:     {Version{1, 26}, "compressor choose_first"},
	corsPerFilter:             {Version{1, 26}, "per-route CORS in typed_per_filter_config"},
	extAuthzAllowedHeaders:    {Version{1, 26}, "ext_authz allowed_headers"},
	otelLogStatPrefix:         {Version{1, 31}, "OpenTelemetry access log stat_prefix"},
	localRateLimitDescriptors: {Version{1, 33}, "local rate-limit descriptors (the filter's rate_limits)"},
	localRateLimitPerClient:   {Version{1, 35}, "per-client local rate-limit buckets"},
	otelLogTopLevel:           {Version{1, 37}, "OpenTelemetry access log grpc_service/log_name"},
}

// lastThreshold is the oldest version that has every feature.
func lastThreshold() Version {
	v := Oldest
	for _, f := range features {
		if v.Less(f.since) {
			v = f.since
		}
	}
	return v
}

// Features lists, for the docs and tests, each feature and the release
// that brought it.
func Features() []struct {
	Name  string
	Since Version
} {
	out := make([]struct {
		Name  string
		Since Version
	}, len(features))
	for i, f := range features {
		out[i].Name, out[i].Since = f.name, f.since
	}
	return out
}
