package xds

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetworkv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Intentions as Envoy RBAC, built the way Consul's own xDS server builds
// it (agent/xds/rbac.go). The decisions follow Consul's documented
// precedence; where Consul 1.15 differs from its documentation (an exact
// deny below a wildcard-destination rule: TestRBACDecidesLikeConsul's
// "cache" case) the bridge follows the documentation.
//
// Intentions are ordered rules (the first whose source matches decides)
// with a default; Envoy's RBAC is one action and a set of policies any
// of which matches. The order is removed by making each rule exclude the
// callers of the rules before it ("* AND NOT web"), after which the rules
// whose action is the default say nothing and are left out: the policies
// are the exceptions to the default. Default allow makes a DENY RBAC,
// default deny an ALLOW RBAC (nothing listed: nothing gets in).
//
// Callers are named by their certificate's SPIFFE id (URI SAN), matched
// on service name only: the trust domain and datacenter are whatever the
// listener's validation context (the Connect CA roots) accepted.

// ErrIntention marks intentions the translator cannot enforce as given.
var ErrIntention = errors.New("invalid intentions")

// Policy names as Consul gives them, so dashboards and RBAC stats
// (rbac.policy.consul-intentions-layer4...) carry over.
const (
	rbacPolicyL4       = "consul-intentions-layer4"
	rbacPolicyL7Prefix = "consul-intentions-layer7-"
	// rbacStatPrefix is the network RBAC filter's, as Consul's.
	rbacStatPrefix = "connect_authz"
)

// HTTPRBAC is the configuration of the HTTP RBAC filter
// (envoy.filters.http.rbac) enforcing in: L4 rules and L7 permissions
// alike. Envoy sidecars of HTTP services and grpc-go xDS servers
// (which enforce this filter from their inbound listener) use it.
func HTTPRBAC(in ir.Intentions) (*rbachttpv3.RBAC, error) {
	rules, err := rbacRules(in, true)
	if err != nil {
		return nil, err
	}
	return &rbachttpv3.RBAC{Rules: rules}, nil
}

// HTTPRBACFilter is HTTPRBAC as the HTTP filter to put first in an HTTP
// connection manager's filters (before the router).
func HTTPRBACFilter(in ir.Intentions) (*hcmv3.HttpFilter, error) {
	cfg, err := HTTPRBAC(in)
	if err != nil {
		return nil, err
	}
	return &hcmv3.HttpFilter{
		Name:       wellknown.HTTPRoleBasedAccessControl,
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(cfg)},
	}, nil
}

// NetworkRBAC is the configuration of the network RBAC filter
// (envoy.filters.network.rbac) enforcing in on a TCP listener. L7
// permissions cannot be checked there: they are an error (Consul
// refuses them for a destination that is not HTTP).
func NetworkRBAC(in ir.Intentions) (*rbacnetworkv3.RBAC, error) {
	rules, err := rbacRules(in, false)
	if err != nil {
		return nil, err
	}
	return &rbacnetworkv3.RBAC{StatPrefix: rbacStatPrefix, Rules: rules}, nil
}

// flatRule is a rule once precedence is removed: it matches its source
// except the exact sources of rules before it.
type flatRule struct {
	source string
	not    []string
	perms  []*rbacv3.Permission
}

// rbacRules builds the RBAC of in; http says L7 permissions can be
// enforced.
func rbacRules(in ir.Intentions, http bool) (*rbacv3.RBAC, error) {
	def := in.Default
	var errs []error
	if def != ir.IntentionAllow && def != ir.IntentionDeny {
		errs = append(errs, fmt.Errorf("default intention %q: must be %q or %q: %w", def, ir.IntentionAllow, ir.IntentionDeny, ErrIntention))
	}
	var flat []flatRule
	var earlierExact []string
	wildcard := false
	seen := map[string]bool{}
	for i := range in.Rules {
		r := &in.Rules[i]
		at := fmt.Sprintf("intention %d (source %q)", i, r.Source)
		if err := checkRule(at, r, http); err != nil {
			errs = append(errs, err)
			continue
		}
		// A source some earlier rule already matched never reaches this
		// one: Consul's "same source" removal, and everything after "*".
		if wildcard || seen[r.Source] {
			continue
		}
		f := flatRule{source: r.Source}
		if r.Source == "*" {
			f.not, wildcard = slices.Clone(earlierExact), true
		} else {
			earlierExact, seen[r.Source] = append(earlierExact, r.Source), true
		}
		if len(r.Permissions) == 0 {
			// Still excludes its source from the rules below (done
			// above), but says what the default says.
			if r.Action != def {
				flat = append(flat, f)
			}
			continue
		}
		f.perms = flatPermissions(r.Permissions, def)
		if len(f.perms) > 0 {
			flat = append(flat, f)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := &rbacv3.RBAC{Action: rbacv3.RBAC_ALLOW, Policies: map[string]*rbacv3.Policy{}}
	if def == ir.IntentionAllow {
		out.Action = rbacv3.RBAC_DENY
	}
	var l4 []*rbacv3.Principal
	for i, f := range flat {
		p := flatPrincipal(&f)
		if f.perms == nil {
			l4 = append(l4, p)
			continue
		}
		out.Policies[fmt.Sprintf("%s%d", rbacPolicyL7Prefix, i)] = &rbacv3.Policy{Principals: []*rbacv3.Principal{p}, Permissions: f.perms}
	}
	if len(l4) > 0 {
		out.Policies[rbacPolicyL4] = &rbacv3.Policy{Principals: l4, Permissions: []*rbacv3.Permission{anyPermission()}}
	}
	if len(out.Policies) == 0 {
		out.Policies = nil
	}
	return out, nil
}

func checkRule(at string, r *ir.IntentionRule, http bool) error {
	validAction := func(a ir.IntentionAction) bool { return a == ir.IntentionAllow || a == ir.IntentionDeny }
	switch {
	case r.Source == "":
		return fmt.Errorf("%s: no source: %w", at, ErrIntention)
	case r.Source != "*" && strings.Contains(r.Source, "*"):
		return fmt.Errorf("%s: '*' must be the whole source: %w", at, ErrIntention)
	case len(r.Permissions) > 0 && r.Action != "":
		return fmt.Errorf("%s: both an action and L7 permissions: %w", at, ErrIntention)
	case len(r.Permissions) > 0 && !http:
		return fmt.Errorf("%s: L7 permissions on a destination whose protocol is tcp; make the service http, http2 or grpc (service-defaults protocol) or use an L4 action: %w", at, ErrIntention)
	case len(r.Permissions) == 0 && !validAction(r.Action):
		return fmt.Errorf("%s: action %q: %w", at, r.Action, ErrIntention)
	}
	for j := range r.Permissions {
		p := &r.Permissions[j]
		pat := fmt.Sprintf("%s permission %d", at, j)
		if !validAction(p.Action) {
			return fmt.Errorf("%s: action %q: %w", pat, p.Action, ErrIntention)
		}
		for _, re := range append([]string{p.PathRegex}, headerRegexes(p.Headers)...) {
			if re == "" {
				continue
			}
			if _, err := regexp.Compile(re); err != nil {
				return fmt.Errorf("%s: regex %q: %v: %w", pat, re, err, ErrIntention)
			}
		}
	}
	return nil
}

func headerRegexes(hs []ir.IntentionHeader) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Regex)
	}
	return out
}

// flatPermissions removes the order of a rule's permissions as the rules'
// is removed: each excludes the requests of those before it, and those
// whose action is the default are left out.
func flatPermissions(perms []ir.IntentionPermission, def ir.IntentionAction) []*rbacv3.Permission {
	var out, earlier []*rbacv3.Permission
	for i := range perms {
		p := buildPermission(&perms[i])
		if perms[i].Action != def {
			if len(earlier) == 0 {
				out = append(out, p)
			} else {
				parts := []*rbacv3.Permission{p}
				for _, e := range earlier {
					parts = append(parts, &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: e}})
				}
				out = append(out, andPermissions(parts))
			}
		}
		earlier = append(earlier, p)
	}
	return out
}

// flatPrincipal matches f's source and none of the sources it excludes.
func flatPrincipal(f *flatRule) *rbacv3.Principal {
	if len(f.not) == 0 {
		return spiffePrincipal(f.source)
	}
	ids := []*rbacv3.Principal{spiffePrincipal(f.source)}
	for _, n := range f.not {
		ids = append(ids, &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: spiffePrincipal(n)}})
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: ids}}}
}

// SPIFFEPattern is the regular expression the SPIFFE ids of source's
// certificates match ("*": every service), in the default namespace, any
// trust domain and datacenter (what Consul's RBAC matches).
func SPIFFEPattern(source string) string {
	svc := `[^/]+`
	if source != "*" {
		svc = regexp.QuoteMeta(source)
	}
	return `^spiffe://[^/]+/ns/default/dc/[^/]+/svc/` + svc + `$`
}

func spiffePrincipal(source string) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{
		PrincipalName: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: SPIFFEPattern(source)}}},
	}}}
}

func anyPermission() *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}
}

func andPermissions(ps []*rbacv3.Permission) *rbacv3.Permission {
	switch len(ps) {
	case 0:
		return anyPermission()
	case 1:
		return ps[0]
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: ps}}}
}

// buildPermission is the request match of one L7 permission: its path,
// headers and methods, all of which must match.
func buildPermission(p *ir.IntentionPermission) *rbacv3.Permission {
	var parts []*rbacv3.Permission
	var path *matcherv3.StringMatcher
	switch {
	case p.PathExact != "":
		path = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: p.PathExact}}
	case p.PathPrefix != "":
		path = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: p.PathPrefix}}
	case p.PathRegex != "":
		path = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: p.PathRegex}}}
	}
	if path != nil {
		// url_path is the path without the query string, which is what
		// Consul's path permissions mean.
		parts = append(parts, &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{Rule: &matcherv3.PathMatcher_Path{Path: path}}}})
	}
	for _, h := range p.Headers {
		hm := &routev3.HeaderMatcher{Name: h.Name, InvertMatch: h.Invert}
		str := func(m *matcherv3.StringMatcher) {
			m.IgnoreCase = h.IgnoreCase
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: m}
		}
		switch {
		case h.Exact != "":
			str(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: h.Exact}})
		case h.Prefix != "":
			str(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: h.Prefix}})
		case h.Suffix != "":
			str(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: h.Suffix}})
		case h.Contains != "":
			str(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Contains{Contains: h.Contains}})
		case h.Regex != "":
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: h.Regex}},
			}}
		default:
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
		}
		parts = append(parts, &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: hm}})
	}
	if len(p.Methods) > 0 {
		alts := make([]string, len(p.Methods))
		for i, m := range p.Methods {
			alts[i] = regexp.QuoteMeta(m)
		}
		parts = append(parts, &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{
			Name: ":method",
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: strings.Join(alts, "|")}},
			}},
		}}})
	}
	return andPermissions(parts)
}
