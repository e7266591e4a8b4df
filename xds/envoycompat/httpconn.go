package envoycompat

import (
	"slices"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	grpcaccesslogv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	otelv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/open_telemetry/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	zstdv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/zstd/compressor/v3"
	compressorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	jwtauthnv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	localratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// httpConnectionManager rewrites a connection manager (m is any decoded
// network filter config; others are left alone): its HTTP filters, its
// tracer, its access logs and an inline route configuration.
func (r *rewriter) httpConnectionManager(m proto.Message) bool {
	hcm, ok := m.(*hcmv3.HttpConnectionManager)
	if !ok {
		return false
	}
	changed := false
	if !r.c.has(otelTracer) && hcm.GetTracing().GetProvider().GetTypedConfig().MessageIs(&tracev3.OpenTelemetryConfig{}) {
		// No older tracer speaks OTLP: the listener is served untraced.
		hcm.Tracing = nil
		r.note(otelTracer, "left out, requests are not traced")
		changed = true
	}
	for _, al := range hcm.GetAccessLog() {
		if r.accessLog(al) {
			changed = true
		}
	}
	kept := hcm.HttpFilters[:0:0]
	for _, f := range hcm.GetHttpFilters() {
		tc := f.GetTypedConfig()
		if tc == nil {
			kept = append(kept, f)
			continue
		}
		if !r.c.has(zstdCompressor) && zstdFilter(tc) {
			r.note(zstdCompressor, "filter left out, responses are compressed with the other algorithms")
			changed = true
			continue
		}
		if r.typed(tc, r.httpFilter) {
			changed = true
		}
		kept = append(kept, f)
	}
	hcm.HttpFilters = kept
	if rc := hcm.GetRouteConfig(); rc != nil && r.routeConfig(rc) {
		changed = true
	}
	return changed
}

// zstdFilter reports whether a compressor filter's library is zstd.
func zstdFilter(tc *anypb.Any) bool {
	c := &compressorv3.Compressor{}
	return tc.MessageIs(c) && tc.UnmarshalTo(c) == nil && c.GetCompressorLibrary().GetTypedConfig().MessageIs(&zstdv3.Zstd{})
}

// httpFilter rewrites one HTTP filter's config.
func (r *rewriter) httpFilter(m proto.Message) bool {
	switch f := m.(type) {
	case *compressorv3.Compressor:
		if f.GetChooseFirst() && !r.c.has(compressorChooseFirst) {
			// Only a preference among equally accepted encodings.
			f.ChooseFirst = false
			r.note(compressorChooseFirst, "left out, Envoy picks among equally accepted encodings")
			return true
		}
	case *jwtauthnv3.JwtAuthentication:
		changed := false
		if !r.c.has(jwtClaimToHeaders) {
			for _, p := range f.GetProviders() {
				if len(p.GetClaimToHeaders()) > 0 {
					p.ClaimToHeaders = nil
					changed = true
				}
			}
			if changed {
				r.note(jwtClaimToHeaders, "left out, verified claims are not copied to headers")
			}
		}
		return changed
	case *extauthzv3.ExtAuthz:
		if f.GetAllowedHeaders() != nil && !r.c.has(extAuthzAllowedHeaders) {
			// Its older home, http_service.authorization_request, is for
			// an HTTP service; a gRPC one then gets every header.
			f.AllowedHeaders = nil
			r.note(extAuthzAllowedHeaders, "left out, the gRPC authorization service receives every request header")
			return true
		}
	case *localratelimitv3.LocalRateLimit:
		return r.localRateLimit(f)
	}
	return false
}

// localRateLimit leaves out what an older local rate limit cannot do:
// before 1.33 it has no rate_limits of its own to fill descriptors
// (its descriptor buckets never match, so they go, with the actions);
// before 1.35 an entry without a value matches only an empty value, not
// each client, so the per-client descriptors go.
func (r *rewriter) localRateLimit(l *localratelimitv3.LocalRateLimit) bool {
	switch {
	case r.c.has(localRateLimitPerClient):
		return false
	case !r.c.has(localRateLimitDescriptors):
		if len(l.GetDescriptors()) == 0 && len(l.GetRateLimits()) == 0 {
			return false
		}
		l.Descriptors, l.RateLimits = nil, nil
		r.note(localRateLimitDescriptors, "left out, those requests share the route's bucket")
		return true
	}
	kept := l.Descriptors[:0:0]
	for _, d := range l.GetDescriptors() {
		if !slices.ContainsFunc(d.GetEntries(), func(e *ratelimitv3.RateLimitDescriptor_Entry) bool { return e.GetValue() == "" }) {
			kept = append(kept, d)
		}
	}
	if len(kept) == len(l.GetDescriptors()) {
		return false
	}
	l.Descriptors = kept
	r.note(localRateLimitPerClient, "left out, those clients share the route's bucket")
	return true
}

// accessLog moves an OpenTelemetry logger's service and name into
// common_config, where Envoys before 1.37 read them.
func (r *rewriter) accessLog(al *accesslogv3.AccessLog) bool {
	if r.c.has(otelLogTopLevel) || al.GetTypedConfig() == nil {
		return false
	}
	return r.typed(al.GetTypedConfig(), func(m proto.Message) bool {
		o, ok := m.(*otelv3.OpenTelemetryAccessLogConfig)
		if !ok || o.GetGrpcService() == nil && o.GetLogName() == "" {
			return false
		}
		if o.CommonConfig == nil {
			o.CommonConfig = &grpcaccesslogv3.CommonGrpcAccessLogConfig{TransportApiVersion: corev3.ApiVersion_V3}
		}
		o.CommonConfig.LogName, o.CommonConfig.GrpcService = o.GetLogName(), o.GetGrpcService()
		o.LogName, o.GrpcService = "", nil
		r.note(otelLogTopLevel, "served in common_config")
		if o.GetStatPrefix() != "" && !r.c.has(otelLogStatPrefix) {
			o.StatPrefix = ""
			r.note(otelLogStatPrefix, "left out, the logger's statistics are not prefixed")
		}
		return true
	})
}

// corsFilter and compressorFilters name the per-filter configs below.
const (
	corsFilter        = "envoy.filters.http.cors"
	compressorFilters = "envoy.filters.http.compressor."
)

// perFilter rewrites a virtual host's or route's typed_per_filter_config
// (m, modified in place: it belongs to a copy); setCORS places a CORS
// policy in the older field, reporting false where there is none.
func (r *rewriter) perFilter(m map[string]*anypb.Any, setCORS func(*routev3.CorsPolicy) bool) bool {
	changed := false
	for name, cfg := range m {
		switch {
		case name == corsFilter && !r.c.has(corsPerFilter):
			p := &corsv3.CorsPolicy{}
			if cfg.UnmarshalTo(p) != nil {
				continue
			}
			// Before, the CORS filter took no per-route config (Envoy
			// rejects the route configuration): the policy is the route's
			// or virtual host's own cors field.
			delete(m, name)
			changed = true
			if setCORS(oldCORS(p)) {
				r.note(corsPerFilter, "served as the cors field of the route or virtual host")
			} else {
				r.note(corsPerFilter, "left out on a redirect or direct-response route")
			}
		case strings.HasPrefix(name, compressorFilters) && !r.c.has(compressorPerRoute):
			// The compressor took no per-route config either: the route
			// is compressed like its listener.
			delete(m, name)
			changed = true
			r.note(compressorPerRoute, "left out, the route is compressed like its listener")
		default:
			if r.typed(cfg, r.httpFilter) {
				changed = true
			}
		}
	}
	return changed
}

// oldCORS is the route's CorsPolicy with the fields the filter's has.
func oldCORS(p *corsv3.CorsPolicy) *routev3.CorsPolicy {
	out := &routev3.CorsPolicy{
		AllowOriginStringMatch: p.GetAllowOriginStringMatch(),
		AllowMethods:           p.GetAllowMethods(),
		AllowHeaders:           p.GetAllowHeaders(),
		ExposeHeaders:          p.GetExposeHeaders(),
		MaxAge:                 p.GetMaxAge(),
		AllowCredentials:       p.GetAllowCredentials(),
		ShadowEnabled:          p.GetShadowEnabled(),
	}
	if f := p.GetFilterEnabled(); f != nil {
		out.EnabledSpecifier = &routev3.CorsPolicy_FilterEnabled{FilterEnabled: f}
	}
	return out
}
