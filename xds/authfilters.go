package xds

import (
	"maps"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitconfv3 "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	jwtauthnv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// The listener filters that decide whether a request passes at all:
// external authorization (and, with it, JWT authentication and the
// global rate limit). Each calls a cluster, which the consistency check
// requires to be served (filterClusters).

const (
	extAuthzFilter  = "envoy.filters.http.ext_authz"
	jwtAuthnFilter  = "envoy.filters.http.jwt_authn"
	rateLimitFilter = "envoy.filters.http.ratelimit"
	// jwksFetchTimeout bounds one fetch of a remote key set.
	jwksFetchTimeout = 5 * time.Second
)

// buildExtAuthz is the ext_authz filter calling a's service over gRPC
// (the v3 Authorization API).
func buildExtAuthz(a *ir.ExtAuthz) *extauthzv3.ExtAuthz {
	svc := grpcCluster(a.Service)
	if a.Timeout > 0 {
		svc.Timeout = durationpb.New(a.Timeout)
	}
	out := &extauthzv3.ExtAuthz{
		Services:            &extauthzv3.ExtAuthz_GrpcService{GrpcService: svc},
		TransportApiVersion: corev3.ApiVersion_V3,
		FailureModeAllow:    a.FailureModeAllow,
		StatPrefix:          "ext_authz",
	}
	if len(a.Headers) > 0 {
		out.AllowedHeaders = &matcherv3.ListStringMatcher{}
		for _, h := range a.Headers {
			out.AllowedHeaders.Patterns = append(out.AllowedHeaders.Patterns, exactMatcher(h))
		}
	}
	return out
}

// extAuthzOff exempts a route from its listener's ext_authz.
func extAuthzOff() *extauthzv3.ExtAuthzPerRoute {
	return &extauthzv3.ExtAuthzPerRoute{Override: &extauthzv3.ExtAuthzPerRoute_Disabled{Disabled: true}}
}

// filterClusters are the clusters a connection manager's HTTP filters
// call (authorization, JWKS, rate-limit services).
func filterClusters(hcm *hcmv3.HttpConnectionManager) []string {
	var out []string
	for _, f := range hcm.GetHttpFilters() {
		switch f.GetName() {
		case jwtAuthnFilter:
			c := &jwtauthnv3.JwtAuthentication{}
			if f.GetTypedConfig().UnmarshalTo(c) == nil {
				for _, n := range slices.Sorted(maps.Keys(c.GetProviders())) {
					if cl := c.GetProviders()[n].GetRemoteJwks().GetHttpUri().GetCluster(); cl != "" {
						out = append(out, cl)
					}
				}
			}
		case rateLimitFilter:
			c := &ratelimitfilterv3.RateLimit{}
			if f.GetTypedConfig().UnmarshalTo(c) == nil {
				out = append(out, c.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName())
			}
		case extAuthzFilter:
			c := &extauthzv3.ExtAuthz{}
			if f.GetTypedConfig().UnmarshalTo(c) == nil {
				out = append(out, c.GetGrpcService().GetEnvoyGrpc().GetClusterName())
			}
		}
	}
	return out
}

// jwtRequirement names the requirement of the listener's jwt_authn
// filter that a route picks: every provider has one that requires its
// token and one that also lets requests without a token pass, so a
// route choosing either is an RDS change.
func jwtRequirement(provider string, allowMissing bool) string {
	if allowMissing {
		return provider + ".allow_missing"
	}
	return provider
}

// buildJWTAuthn is the jwt_authn filter of a listener's providers. It
// has no rules: only the routes' per-filter config (a requirement name)
// makes it verify anything.
func buildJWTAuthn(providers []ir.JWTProvider) *jwtauthnv3.JwtAuthentication {
	out := &jwtauthnv3.JwtAuthentication{
		Providers:      map[string]*jwtauthnv3.JwtProvider{},
		RequirementMap: map[string]*jwtauthnv3.JwtRequirement{},
	}
	for i := range providers {
		p := &providers[i]
		jp := &jwtauthnv3.JwtProvider{
			Issuer:               p.Issuer,
			Audiences:            p.Audiences,
			Forward:              p.Forward,
			ForwardPayloadHeader: p.ForwardPayloadHeader,
		}
		if p.JWKSCluster != "" {
			rj := &jwtauthnv3.RemoteJwks{HttpUri: &corev3.HttpUri{
				Uri:              p.JWKSURI,
				HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: p.JWKSCluster},
				Timeout:          durationpb.New(jwksFetchTimeout),
			}}
			if p.CacheDuration > 0 {
				rj.CacheDuration = durationpb.New(p.CacheDuration)
			}
			jp.JwksSourceSpecifier = &jwtauthnv3.JwtProvider_RemoteJwks{RemoteJwks: rj}
		} else {
			jp.JwksSourceSpecifier = &jwtauthnv3.JwtProvider_LocalJwks{LocalJwks: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: p.LocalJWKS}}}
		}
		for _, c := range slices.Sorted(maps.Keys(p.ClaimHeaders)) {
			jp.ClaimToHeaders = append(jp.ClaimToHeaders, &jwtauthnv3.JwtClaimToHeader{ClaimName: c, HeaderName: p.ClaimHeaders[c]})
		}
		out.Providers[p.Name] = jp
		required := &jwtauthnv3.JwtRequirement{RequiresType: &jwtauthnv3.JwtRequirement_ProviderName{ProviderName: p.Name}}
		out.RequirementMap[jwtRequirement(p.Name, false)] = required
		out.RequirementMap[jwtRequirement(p.Name, true)] = &jwtauthnv3.JwtRequirement{RequiresType: &jwtauthnv3.JwtRequirement_RequiresAny{RequiresAny: &jwtauthnv3.JwtRequirementOrList{
			Requirements: []*jwtauthnv3.JwtRequirement{required, {RequiresType: &jwtauthnv3.JwtRequirement_AllowMissing{AllowMissing: &emptypb.Empty{}}}},
		}}}
	}
	return out
}

// jwtPerRoute is a route's or virtual host's choice among its
// listener's requirements, or none.
func jwtPerRoute(j *ir.JWTRule) *jwtauthnv3.PerRouteConfig {
	if j.Bypass {
		return &jwtauthnv3.PerRouteConfig{RequirementSpecifier: &jwtauthnv3.PerRouteConfig_Disabled{Disabled: true}}
	}
	return &jwtauthnv3.PerRouteConfig{RequirementSpecifier: &jwtauthnv3.PerRouteConfig_RequirementName{RequirementName: jwtRequirement(j.Provider, j.AllowMissing)}}
}

// buildRateLimit is the global rate limit filter asking s about the
// descriptors of each request's route (or virtual host).
func buildRateLimit(s *ir.RateLimitService) *ratelimitfilterv3.RateLimit {
	out := &ratelimitfilterv3.RateLimit{
		Domain:          s.Domain,
		FailureModeDeny: s.FailureModeDeny,
		RateLimitService: &ratelimitconfv3.RateLimitServiceConfig{
			GrpcService:         grpcCluster(s.Service),
			TransportApiVersion: corev3.ApiVersion_V3,
		},
	}
	if s.Timeout > 0 {
		out.Timeout = durationpb.New(s.Timeout)
	}
	return out
}

// globalRateLimits are a route's or virtual host's descriptors as Envoy
// rate limit actions, nil for none.
func globalRateLimits(ds []ir.GlobalDescriptor) []*routev3.RateLimit {
	var out []*routev3.RateLimit
	for _, d := range ds {
		rl := &routev3.RateLimit{}
		for _, e := range d.Entries {
			a := &routev3.RateLimit_Action{}
			switch {
			case e.ClientAddress:
				a.ActionSpecifier = &routev3.RateLimit_Action_RemoteAddress_{RemoteAddress: &routev3.RateLimit_Action_RemoteAddress{}}
			case e.Header != "":
				a.ActionSpecifier = &routev3.RateLimit_Action_RequestHeaders_{RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{HeaderName: e.Header, DescriptorKey: e.Key}}
			default:
				a.ActionSpecifier = &routev3.RateLimit_Action_GenericKey_{GenericKey: &routev3.RateLimit_Action_GenericKey{DescriptorValue: e.GenericKey, DescriptorKey: e.Key}}
			}
			rl.Actions = append(rl.Actions, a)
		}
		out = append(out, rl)
	}
	return out
}
