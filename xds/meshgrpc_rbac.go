package xds

import (
	"fmt"
	"regexp"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// meshGRPCRBAC turns a destination's intentions into the rules of one
// HTTP RBAC filter as gRPC evaluates it (gRFC A41). Intentions decide by
// the first rule whose source matches, L7 permissions by the first whose
// request match applies; RBAC allows when any policy matches. So the
// rules are one ALLOW action whose policies each say "this rule decides
// and allows": rule i's source and none of the sources before it, and for
// an L7 rule, permission k's match and none of the matches before it. The
// default allow is one more policy for callers no rule names; the
// default deny (and an unset default, the safe side) is the absence of
// one. Every principal is a certificate identity (a SPIFFE id as URI
// SAN), so with client certificates required an unauthenticated caller
// matches nothing.
func meshGRPCRBAC(in ir.Intentions, trustDomain string) (*rbacv3.RBAC, error) {
	out := &rbacv3.RBAC{Action: rbacv3.RBAC_ALLOW, Policies: map[string]*rbacv3.Policy{}}
	var prior []*rbacv3.Principal
	for i, r := range in.Rules {
		src := sourcePrincipal(r.Source, trustDomain)
		who := src
		if len(prior) > 0 {
			who = andIDs(src, &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: orIDs(prior...)}})
		}
		prior = append(prior, src)
		name := fmt.Sprintf("%03d-%s", i, r.Source)
		switch {
		case len(r.Permissions) > 0:
			var earlier []*rbacv3.Permission
			var allowed []*rbacv3.Permission
			for _, p := range r.Permissions {
				m, err := permissionMatch(p)
				if err != nil {
					return nil, fmt.Errorf("intention from %q: %w", r.Source, err)
				}
				this := m
				if len(earlier) > 0 {
					this = andRules(m, &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: orRules(earlier...)}})
				}
				earlier = append(earlier, m)
				if p.Action == ir.IntentionAllow {
					allowed = append(allowed, this)
				}
			}
			if len(allowed) > 0 {
				out.Policies[name] = &rbacv3.Policy{Principals: []*rbacv3.Principal{who}, Permissions: allowed}
			}
		case r.Action == ir.IntentionAllow:
			out.Policies[name] = &rbacv3.Policy{Principals: []*rbacv3.Principal{who}, Permissions: []*rbacv3.Permission{anyPermission()}}
		}
	}
	if in.Default == ir.IntentionAllow {
		who := &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}
		if len(prior) > 0 {
			who = &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: orIDs(prior...)}}
		}
		out.Policies["default-allow"] = &rbacv3.Policy{Principals: []*rbacv3.Principal{who}, Permissions: []*rbacv3.Permission{anyPermission()}}
	}
	return out, nil
}

// sourcePrincipal matches the client certificates of a source service in
// any datacenter, or of any service for "*", as Consul's own RBAC does.
func sourcePrincipal(source, trustDomain string) *rbacv3.Principal {
	svc := "[^/]+"
	if source != "*" {
		svc = regexp.QuoteMeta(source)
	}
	re := "^spiffe://" + regexp.QuoteMeta(trustDomain) + "/ns/default/dc/[^/]+/svc/" + svc + "$"
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{
		PrincipalName: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}},
	}}}
}

// permissionMatch is the request match of one L7 permission: its path,
// methods and headers, all of them.
func permissionMatch(p ir.IntentionPermission) (*rbacv3.Permission, error) {
	var all []*rbacv3.Permission
	path := func(sm *matcherv3.StringMatcher) {
		all = append(all, &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{Rule: &matcherv3.PathMatcher_Path{Path: sm}}}})
	}
	switch {
	case p.PathExact != "":
		path(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: p.PathExact}})
	case p.PathPrefix != "":
		path(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: p.PathPrefix}})
	case p.PathRegex != "":
		if _, err := regexp.Compile(p.PathRegex); err != nil {
			return nil, fmt.Errorf("path regex %q: %w", p.PathRegex, err)
		}
		path(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: p.PathRegex}}})
	}
	if len(p.Methods) > 0 {
		var methods []*rbacv3.Permission
		for _, m := range p.Methods {
			methods = append(methods, headerPermission(&routev3.HeaderMatcher{Name: ":method",
				HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: m}}}}))
		}
		all = append(all, orRules(methods...))
	}
	for _, h := range p.Headers {
		hm := &routev3.HeaderMatcher{Name: h.Name, InvertMatch: h.Invert}
		var sm *matcherv3.StringMatcher
		switch {
		case h.Present:
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
		case h.Exact != "":
			sm = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: h.Exact}}
		case h.Prefix != "":
			sm = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: h.Prefix}}
		case h.Suffix != "":
			sm = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: h.Suffix}}
		case h.Regex != "":
			if _, err := regexp.Compile(h.Regex); err != nil {
				return nil, fmt.Errorf("header %q regex %q: %w", h.Name, h.Regex, err)
			}
			sm = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: h.Regex}}}
		default:
			return nil, fmt.Errorf("header %q: no match: %w", h.Name, ErrUnsupportedGRPC)
		}
		if sm != nil {
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: sm}
		}
		all = append(all, headerPermission(hm))
	}
	switch len(all) {
	case 0:
		return anyPermission(), nil
	case 1:
		return all[0], nil
	}
	return andRules(all...), nil
}

func headerPermission(h *routev3.HeaderMatcher) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: h}}
}

func anyPermission() *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}
}

func andRules(ps ...*rbacv3.Permission) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: ps}}}
}

func orRules(ps ...*rbacv3.Permission) *rbacv3.Permission {
	if len(ps) == 1 {
		return ps[0]
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: ps}}}
}

func andIDs(ps ...*rbacv3.Principal) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: ps}}}
}

func orIDs(ps ...*rbacv3.Principal) *rbacv3.Principal {
	if len(ps) == 1 {
		return ps[0]
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_OrIds{OrIds: &rbacv3.Principal_Set{Ids: ps}}}
}
