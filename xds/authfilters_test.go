package xds_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	jwtauthnv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

const (
	extAuthzFilter = "envoy.filters.http.ext_authz"
	jwtAuthnFilter = "envoy.filters.http.jwt_authn"
)

var testJWTProviders = []ir.JWTProvider{{Name: "corp", Issuer: "https://auth.example.com", JWKSCluster: "authz", JWKSURI: "http://authz/.well-known/jwks.json"}}

var testExtAuthz = &ir.ExtAuthz{Service: "authz", Timeout: 250 * time.Millisecond, Headers: []string{"authorization"}}

// authModel is featureModel with the clusters the auth filters call.
func authModel(mutate func(l *ir.Listener)) *ir.Model {
	m := featureModel(mutate)
	m.Clusters = []*ir.Cluster{cluster("authz"), cluster("web")}
	return m
}

// ext_authz: after CORS (a preflight is answered unauthenticated),
// before the rate limits; a route opts out in RDS alone; its service
// must be served.
func TestExtAuthz(t *testing.T) {
	on := func(l *ir.Listener) { l.HTTP.ExtAuthz = testExtAuthz }
	out := translate(t, authModel(on))
	if len(out.Failed) > 0 {
		t.Fatal(out.Failed)
	}
	hcm := hcmOf(t, out.Groups["edge"].Listeners[0])
	want := []string{corsFilter, extAuthzFilter, localRateLimitFilter, faultFilter, wellknown.Router}
	if got := filterNames(hcm); !slices.Equal(got, want) {
		t.Errorf("filters = %v, want %v", got, want)
	}
	cfg := &extauthzv3.ExtAuthz{}
	if err := hcm.GetHttpFilters()[1].GetTypedConfig().UnmarshalTo(cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "authz" || cfg.GetGrpcService().GetTimeout().AsDuration() != 250*time.Millisecond ||
		cfg.GetFailureModeAllow() || len(cfg.GetAllowedHeaders().GetPatterns()) != 1 {
		t.Errorf("ext_authz = %v", cfg)
	}

	off := translate(t, authModel(func(l *ir.Listener) { on(l); l.VirtualHosts[0].Routes[0].HTTP.NoExtAuthz = true }))
	if diff := cmp.Diff(out.Groups["edge"].Listeners, off.Groups["edge"].Listeners, protocmp.Transform()); diff != "" {
		t.Errorf("ext_authz = false changed the listener:\n%s", diff)
	}
	if proto.Equal(out.Groups["edge"].Routes[0], off.Groups["edge"].Routes[0]) {
		t.Error("ext_authz = false did not change the route configuration")
	}
	per := &extauthzv3.ExtAuthzPerRoute{}
	if err := off.Groups["edge"].Routes[0].GetVirtualHosts()[0].GetRoutes()[0].GetTypedPerFilterConfig()[extAuthzFilter].UnmarshalTo(per); err != nil || !per.GetDisabled() {
		t.Errorf("route per-filter config = %v (%v), want disabled", per, err)
	}

	checkUnserved(t, "ext_authz", featureModel(on))
}

// jwt_authn: after CORS, before ext_authz; requirements per provider in
// the listener, so a route requiring a token, admitting none or
// bypassing changes RDS only; the JWKS cluster must be served.
func TestJWTAuthn(t *testing.T) {
	on := func(l *ir.Listener) { l.HTTP.JWTProviders = testJWTProviders; l.HTTP.ExtAuthz = testExtAuthz }
	out := translate(t, authModel(on))
	if len(out.Failed) > 0 {
		t.Fatal(out.Failed)
	}
	hcm := hcmOf(t, out.Groups["edge"].Listeners[0])
	want := []string{corsFilter, jwtAuthnFilter, extAuthzFilter, localRateLimitFilter, faultFilter, wellknown.Router}
	if got := filterNames(hcm); !slices.Equal(got, want) {
		t.Errorf("filters = %v, want %v", got, want)
	}
	for name, rule := range map[string]*ir.JWTRule{
		"corp":               {Provider: "corp"},
		"corp.allow_missing": {Provider: "corp", AllowMissing: true},
		"":                   {Bypass: true},
	} {
		got := translate(t, authModel(func(l *ir.Listener) { on(l); l.VirtualHosts[0].Routes[0].HTTP.JWT = rule }))
		if diff := cmp.Diff(out.Groups["edge"].Listeners, got.Groups["edge"].Listeners, protocmp.Transform()); diff != "" {
			t.Errorf("%+v changed the listener:\n%s", rule, diff)
		}
		per := &jwtauthnv3.PerRouteConfig{}
		if err := got.Groups["edge"].Routes[0].GetVirtualHosts()[0].GetRoutes()[0].GetTypedPerFilterConfig()[jwtAuthnFilter].UnmarshalTo(per); err != nil {
			t.Fatal(err)
		}
		if per.GetRequirementName() != name || per.GetDisabled() != rule.Bypass {
			t.Errorf("%+v: per-route config %v", rule, per)
		}
		cfg := &jwtauthnv3.JwtAuthentication{}
		if err := hcm.GetHttpFilters()[1].GetTypedConfig().UnmarshalTo(cfg); err != nil {
			t.Fatal(err)
		}
		if name != "" && cfg.GetRequirementMap()[name] == nil {
			t.Errorf("requirement %q is not in the listener's filter", name)
		}
	}
	checkUnserved(t, "JWKS", featureModel(func(l *ir.Listener) { l.HTTP.JWTProviders = testJWTProviders }))
}

// checkUnserved: a filter calling a cluster that does not exist is
// refused: the model names it in the group's reach (ClusterRefs), which
// validation rejects before anything is translated; and with the cluster
// served but outside the group's reach, the consistency check fails the
// group.
func checkUnserved(t *testing.T, what string, m *ir.Model) {
	t.Helper()
	if _, err := xds.Translate(m); err == nil || !strings.Contains(err.Error(), `"authz"`) {
		t.Errorf("%s calling a cluster that does not exist: %v, want the model refused naming it", what, err)
	}
	m.Clusters = append(m.Clusters, cluster("authz"))
	m.Groups[0].Clusters = []string{"web"}
	if _, err := xds.Translate(m); err == nil || !strings.Contains(err.Error(), `"authz"`) {
		t.Errorf("%s calling a cluster outside the group's reach: %v, want it refused", what, err)
	}
}

const rateLimitFilter = "envoy.filters.http.ratelimit"

// Global rate limit: after the local one; descriptors are route and
// virtual host rate_limits (RDS only); the service must be served.
func TestGlobalRateLimit(t *testing.T) {
	on := func(l *ir.Listener) {
		l.HTTP.RateLimitService = &ir.RateLimitService{Service: "authz", Domain: "edge", FailureModeDeny: true, Timeout: 50 * time.Millisecond}
	}
	out := translate(t, authModel(on))
	if len(out.Failed) > 0 {
		t.Fatal(out.Failed)
	}
	want := []string{corsFilter, localRateLimitFilter, rateLimitFilter, faultFilter, wellknown.Router}
	if got := filterNames(hcmOf(t, out.Groups["edge"].Listeners[0])); !slices.Equal(got, want) {
		t.Errorf("filters = %v, want %v", got, want)
	}
	descriptors := []ir.GlobalDescriptor{{Entries: []ir.GlobalEntry{{GenericKey: "shop", Key: "generic_key"}, {Header: "x-user-id", Key: "user"}, {ClientAddress: true, Key: "remote_address"}}}}
	got := translate(t, authModel(func(l *ir.Listener) {
		on(l)
		l.VirtualHosts[0].Routes[0].HTTP.GlobalRateLimits = descriptors
		l.VirtualHosts[0].HTTP.GlobalRateLimits = descriptors[:1]
	}))
	if diff := cmp.Diff(out.Groups["edge"].Listeners, got.Groups["edge"].Listeners, protocmp.Transform()); diff != "" {
		t.Errorf("descriptors changed the listener:\n%s", diff)
	}
	vh := got.Groups["edge"].Routes[0].GetVirtualHosts()[0]
	actions := vh.GetRoutes()[0].GetRoute().GetRateLimits()
	if len(actions) != 1 || len(actions[0].GetActions()) != 3 || len(vh.GetRateLimits()) != 1 ||
		actions[0].GetActions()[0].GetGenericKey().GetDescriptorValue() != "shop" ||
		actions[0].GetActions()[1].GetRequestHeaders().GetDescriptorKey() != "user" ||
		actions[0].GetActions()[2].GetRemoteAddress() == nil {
		t.Errorf("route rate limits = %v, virtual host's %v", actions, vh.GetRateLimits())
	}
	checkUnserved(t, "the rate-limit service", featureModel(on))
}
