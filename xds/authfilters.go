package xds

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// The listener filters that decide whether a request passes at all:
// external authorization (and, with it, JWT authentication and the
// global rate limit). Each calls a cluster, which the consistency check
// requires to be served (filterClusters).

const extAuthzFilter = "envoy.filters.http.ext_authz"

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
		case extAuthzFilter:
			c := &extauthzv3.ExtAuthz{}
			if f.GetTypedConfig().UnmarshalTo(c) == nil {
				out = append(out, c.GetGrpcService().GetEnvoyGrpc().GetClusterName())
			}
		}
	}
	return out
}
