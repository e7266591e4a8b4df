package routetest

import (
	"fmt"
	"slices"
	"strings"

	jwtauthnv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// The JWT expectation: what Envoy's jwt_authn filter requires of the
// request's token, from the per-route config of its route (else its
// virtual host) and the listener filter's requirement map.

const jwtAuthnFilter = "envoy.filters.http.jwt_authn"

// jwtDecisions are the values of the jwt expectation.
var jwtDecisions = []string{"required", "allow_missing", "none"}

func decodeJWTExpect(t *Test, e *expectSchema, errorAt func(name, summary, detail string)) {
	if e.JWT == nil {
		return
	}
	if !slices.Contains(jwtDecisions, *e.JWT) {
		errorAt("jwt", "Invalid jwt", fmt.Sprintf("%q: jwt is what Envoy requires of the request's token: %s.", *e.JWT, strings.Join(quoteAll(jwtDecisions), ", ")))
	}
	t.Expect.HTTP.JWT = e.JWT
}

// jwtDecision evaluates the jwt_authn filter (filter.cc): the most
// specific per-filter config decides; disabled or none verifies
// nothing; a requirement name is looked up in the listener's map, where
// a provider alone requires its token and one or'ed with allow_missing
// admits requests without one.
func (c *check) jwtDecision() string {
	if c.m.Route == nil {
		return "none"
	}
	var per *jwtauthnv3.PerRouteConfig
	for _, m := range []map[string]*anypb.Any{c.m.Route.GetTypedPerFilterConfig(), c.m.VirtualHost.GetTypedPerFilterConfig()} {
		if a, ok := m[jwtAuthnFilter]; ok {
			p := &jwtauthnv3.PerRouteConfig{}
			if a.UnmarshalTo(p) == nil {
				per = p
				break
			}
		}
	}
	if per == nil || per.GetDisabled() {
		return "none"
	}
	p := c.e.pol.ProxyFor(c.t.Proxy)
	if p == nil || c.e.out.Groups[p.Name] == nil {
		return "none"
	}
	for _, l := range c.e.out.Groups[p.Name].Listeners {
		if l.GetName() != c.res.RouteConfig {
			continue
		}
		for _, f := range listenerHTTPFilters(l) {
			cfg := &jwtauthnv3.JwtAuthentication{}
			if f.GetName() != jwtAuthnFilter || f.GetTypedConfig().UnmarshalTo(cfg) != nil {
				continue
			}
			req := cfg.GetRequirementMap()[per.GetRequirementName()]
			switch {
			case req == nil:
				return "none"
			case slices.ContainsFunc(req.GetRequiresAny().GetRequirements(), func(r *jwtauthnv3.JwtRequirement) bool { return r.GetAllowMissing() != nil }):
				return "allow_missing"
			}
			return "required"
		}
	}
	return "none"
}

func (c *check) evaluateJWT() {
	want := c.t.Expect.HTTP.JWT
	if want == nil {
		return
	}
	if got := c.jwtDecision(); got != *want {
		c.fail("jwt", "expected %s, got %s", *want, got)
	}
}
