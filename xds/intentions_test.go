package xds_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/intention"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// The RBAC tests evaluate what the translator builds the way Envoy does
// (a small evaluator of the parts it uses) and compare every decision
// with intention.Decide, the ordered evaluation Consul documents: any
// difference is a caller let in or kept out against the intentions.

// rbacAllows evaluates an RBAC the way Envoy's filter does: ALLOW lets
// in what some policy matches, DENY keeps it out.
func rbacAllows(t *testing.T, r *rbacv3.RBAC, spiffe string, req intention.Request) bool {
	t.Helper()
	matched := false
	for _, p := range r.GetPolicies() {
		if policyMatches(t, p, spiffe, req) {
			matched = true
		}
	}
	switch r.GetAction() {
	case rbacv3.RBAC_ALLOW:
		return matched
	case rbacv3.RBAC_DENY:
		return !matched
	}
	t.Fatalf("RBAC action %v", r.GetAction())
	return false
}

func policyMatches(t *testing.T, p *rbacv3.Policy, spiffe string, req intention.Request) bool {
	anyOf := func(n int, f func(int) bool) bool {
		for i := range n {
			if f(i) {
				return true
			}
		}
		return false
	}
	return anyOf(len(p.GetPrincipals()), func(i int) bool { return principalMatches(t, p.GetPrincipals()[i], spiffe) }) &&
		anyOf(len(p.GetPermissions()), func(i int) bool { return permissionMatches(t, p.GetPermissions()[i], req) })
}

func principalMatches(t *testing.T, p *rbacv3.Principal, spiffe string) bool {
	t.Helper()
	switch id := p.GetIdentifier().(type) {
	case *rbacv3.Principal_Any:
		return true
	case *rbacv3.Principal_Authenticated_:
		return stringMatches(t, id.Authenticated.GetPrincipalName(), spiffe, true)
	case *rbacv3.Principal_NotId:
		return !principalMatches(t, id.NotId, spiffe)
	case *rbacv3.Principal_AndIds:
		for _, s := range id.AndIds.GetIds() {
			if !principalMatches(t, s, spiffe) {
				return false
			}
		}
		return true
	}
	t.Fatalf("principal %T not evaluated by this test", p.GetIdentifier())
	return false
}

func permissionMatches(t *testing.T, p *rbacv3.Permission, req intention.Request) bool {
	t.Helper()
	switch r := p.GetRule().(type) {
	case *rbacv3.Permission_Any:
		return true
	case *rbacv3.Permission_NotRule:
		return !permissionMatches(t, r.NotRule, req)
	case *rbacv3.Permission_AndRules:
		for _, s := range r.AndRules.GetRules() {
			if !permissionMatches(t, s, req) {
				return false
			}
		}
		return true
	case *rbacv3.Permission_UrlPath:
		return stringMatches(t, r.UrlPath.GetPath(), req.Path, true)
	case *rbacv3.Permission_Header:
		return headerMatches(t, r.Header, req)
	}
	t.Fatalf("permission %T not evaluated by this test", p.GetRule())
	return false
}

func headerMatches(t *testing.T, h *routev3.HeaderMatcher, req intention.Request) bool {
	t.Helper()
	v, ok := req.Headers[strings.ToLower(h.GetName())]
	if h.GetName() == ":method" {
		v, ok = req.Method, req.Method != ""
	}
	if !ok {
		// Envoy: only an inverted presence match matches a missing header.
		_, presence := h.GetHeaderMatchSpecifier().(*routev3.HeaderMatcher_PresentMatch)
		return presence && h.GetInvertMatch()
	}
	m := ok
	if ok {
		// The deprecated forms are what Consul's own xDS server writes.
		switch s := h.GetHeaderMatchSpecifier().(type) {
		case *routev3.HeaderMatcher_PresentMatch:
		case *routev3.HeaderMatcher_ExactMatch:
			m = v == s.ExactMatch
		case *routev3.HeaderMatcher_PrefixMatch:
			m = strings.HasPrefix(v, s.PrefixMatch)
		case *routev3.HeaderMatcher_SuffixMatch:
			m = strings.HasSuffix(v, s.SuffixMatch)
		case *routev3.HeaderMatcher_SafeRegexMatch:
			m = regexp.MustCompile(`^(?:` + s.SafeRegexMatch.GetRegex() + `)$`).MatchString(v)
		case *routev3.HeaderMatcher_StringMatch:
			m = stringMatches(t, s.StringMatch, v, true)
		default:
			t.Fatalf("header match %T not evaluated by this test", s)
		}
	}
	return m != h.GetInvertMatch()
}

func stringMatches(t *testing.T, m *matcherv3.StringMatcher, v string, present bool) bool {
	t.Helper()
	if !present {
		return false
	}
	fold := func(s string) string {
		if m.GetIgnoreCase() {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return fold(v) == fold(p.Exact)
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(fold(v), fold(p.Prefix))
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(fold(v), fold(p.Suffix))
	case *matcherv3.StringMatcher_Contains:
		return strings.Contains(fold(v), fold(p.Contains))
	case *matcherv3.StringMatcher_SafeRegex:
		return regexp.MustCompile(`^(?:` + p.SafeRegex.GetRegex() + `)$`).MatchString(v)
	}
	t.Fatalf("string match %T not evaluated by this test", m.GetMatchPattern())
	return false
}

var (
	testSources = []string{"web", "api", "ops", "batch"}
	testPaths   = []string{"/", "/admin", "/admin/users", "/v1/items", "/v1/items/7"}
	testMethods = []string{"GET", "POST", "DELETE"}
	testHeaders = []map[string]string{nil, {"x-team": "blue"}, {"x-team": "RED"}}
)

// checkAgainstDecide compares every decision of the RBAC built from in
// with intention.Decide, for every test caller and request.
func checkAgainstDecide(t *testing.T, in ir.Intentions, http bool) {
	t.Helper()
	var rules *rbacv3.RBAC
	if http {
		cfg, err := xds.HTTPRBAC(in)
		if err != nil {
			t.Fatalf("HTTPRBAC: %v", err)
		}
		if err := cfg.ValidateAll(); err != nil {
			t.Fatalf("HTTPRBAC fails Envoy validation: %v", err)
		}
		rules = cfg.GetRules()
	} else {
		cfg, err := xds.NetworkRBAC(in)
		if err != nil {
			t.Fatalf("NetworkRBAC: %v", err)
		}
		if err := cfg.ValidateAll(); err != nil {
			t.Fatalf("NetworkRBAC fails Envoy validation: %v", err)
		}
		rules = cfg.GetRules()
	}
	for _, src := range testSources {
		// Any trust domain and datacenter: RBAC matches the service.
		spiffe := ir.SPIFFEID("11111111-2222.consul", "dc2", src)
		for _, path := range testPaths {
			for _, method := range testMethods {
				for _, hdr := range testHeaders {
					req := intention.Request{Source: src, Method: method, Path: path, Headers: hdr}
					want := intention.Decide(in, req) == ir.IntentionAllow
					if got := rbacAllows(t, rules, spiffe, req); got != want {
						t.Fatalf("%s %s %s %v: RBAC allows=%v, intentions say allow=%v\nintentions: %+v\nRBAC: %v", src, method, path, hdr, got, want, in, rules)
					}
					if !http {
						break
					}
				}
				if !http {
					break
				}
			}
			if !http {
				break
			}
		}
	}
}

func TestRBACCases(t *testing.T) {
	allow, deny := ir.IntentionAllow, ir.IntentionDeny
	rule := func(src string, a ir.IntentionAction) ir.IntentionRule {
		return ir.IntentionRule{Source: src, Action: a}
	}
	cases := map[string]struct {
		in   ir.Intentions
		http bool
		// want: which of testSources get in (L4 cases)
		want []string
	}{
		"default allow, nothing": {in: ir.Intentions{Default: allow}, want: testSources},
		"default deny, nothing":  {in: ir.Intentions{Default: deny}},
		"exact deny over wildcard allow": {
			in:   ir.Intentions{Default: deny, Rules: []ir.IntentionRule{rule("web", deny), rule("*", allow)}},
			want: []string{"api", "ops", "batch"},
		},
		"exact allow over wildcard deny, default allow": {
			in:   ir.Intentions{Default: allow, Rules: []ir.IntentionRule{rule("web", allow), rule("*", deny)}},
			want: []string{"web"},
		},
		"wildcard first shadows exact below": {
			// (* -> api) at 8 outranks (web -> *) at 6: web is allowed.
			in:   ir.Intentions{Default: allow, Rules: []ir.IntentionRule{rule("*", allow), rule("web", deny)}},
			want: testSources,
		},
		"default-action rules still exclude": {
			in:   ir.Intentions{Default: deny, Rules: []ir.IntentionRule{rule("web", deny), rule("api", allow), rule("*", allow)}},
			want: []string{"api", "ops", "batch"},
		},
		"allow list": {
			in:   ir.Intentions{Default: deny, Rules: []ir.IntentionRule{rule("api", allow), rule("ops", allow)}},
			want: []string{"api", "ops"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			checkAgainstDecide(t, tc.in, tc.http)
			checkAgainstDecide(t, tc.in, true)
			cfg, err := xds.NetworkRBAC(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, src := range testSources {
				if rbacAllows(t, cfg.GetRules(), ir.SPIFFEID("td", "dc1", src), intention.Request{Source: src}) {
					got = append(got, src)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("allowed %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRBACShape pins what Consul's Envoys see: the RBAC action follows
// the default, rules with the default's action are left out, a wildcard
// excludes the exact sources above it.
func TestRBACShape(t *testing.T) {
	in := ir.Intentions{Default: ir.IntentionAllow, Rules: []ir.IntentionRule{
		{Source: "web", Action: ir.IntentionAllow},
		{Source: "*", Action: ir.IntentionDeny},
	}}
	cfg, err := xds.NetworkRBAC(in)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.GetRules()
	if r.GetAction() != rbacv3.RBAC_DENY || len(r.GetPolicies()) != 1 || cfg.GetStatPrefix() == "" {
		t.Fatalf("default allow: want a DENY RBAC with one policy and a stat prefix, got %v", cfg)
	}
	p := r.GetPolicies()["consul-intentions-layer4"]
	ids := p.GetPrincipals()[0].GetAndIds().GetIds()
	if len(ids) != 2 || ids[1].GetNotId() == nil {
		t.Fatalf("want * AND NOT web, got %v", p)
	}
	if got := ids[1].GetNotId().GetAuthenticated().GetPrincipalName().GetSafeRegex().GetRegex(); got != `^spiffe://[^/]+/ns/default/dc/[^/]+/svc/web$` {
		t.Errorf("web's principal %q", got)
	}
	if got := ids[0].GetAuthenticated().GetPrincipalName().GetSafeRegex().GetRegex(); got != `^spiffe://[^/]+/ns/default/dc/[^/]+/svc/[^/]+$` {
		t.Errorf("wildcard principal %q", got)
	}
	deny, err := xds.HTTPRBAC(ir.Intentions{Default: ir.IntentionDeny})
	if err != nil || deny.GetRules().GetAction() != rbacv3.RBAC_ALLOW || len(deny.GetRules().GetPolicies()) != 0 {
		t.Errorf("default deny without rules: want an ALLOW RBAC listing nobody, got %v, %v", deny, err)
	}
	f, err := xds.HTTPRBACFilter(in)
	if err != nil || f.GetName() != "envoy.filters.http.rbac" || f.ValidateAll() != nil {
		t.Errorf("HTTPRBACFilter: %v, %v", f, err)
	}
}

func TestRBACL7(t *testing.T) {
	allow, deny := ir.IntentionAllow, ir.IntentionDeny
	perms := []ir.IntentionPermission{
		{Action: deny, PathPrefix: "/admin"},
		{Action: allow, PathExact: "/v1/items", Methods: []string{"GET"}},
		{Action: allow, PathRegex: "/v1/items/[0-9]+", Headers: []ir.IntentionHeader{{Name: "x-team", Exact: "red", IgnoreCase: true}}},
		{Action: deny, Headers: []ir.IntentionHeader{{Name: "x-team", Present: true, Invert: true}}},
		{Action: allow, Headers: []ir.IntentionHeader{{Name: "x-team", Suffix: "ue"}}},
	}
	for _, def := range []ir.IntentionAction{allow, deny} {
		for _, in := range []ir.Intentions{
			{Default: def, Rules: []ir.IntentionRule{{Source: "web", Permissions: perms}, {Source: "*", Action: allow}}},
			{Default: def, Rules: []ir.IntentionRule{{Source: "web", Permissions: perms}, {Source: "*", Action: deny}}},
			{Default: def, Rules: []ir.IntentionRule{{Source: "ops", Action: deny}, {Source: "*", Permissions: perms}}},
		} {
			checkAgainstDecide(t, in, true)
		}
	}
	// Consul refuses L7 intentions on a TCP destination; so does the
	// network filter, rather than enforcing them as something else.
	_, err := xds.NetworkRBAC(ir.Intentions{Default: allow, Rules: []ir.IntentionRule{{Source: "web", Permissions: perms}}})
	if !errors.Is(err, xds.ErrIntention) || !strings.Contains(err.Error(), "tcp") {
		t.Errorf("L7 on TCP: %v", err)
	}
}

func TestRBACErrors(t *testing.T) {
	for name, in := range map[string]ir.Intentions{
		"no default":             {},
		"unknown default":        {Default: "maybe"},
		"no source":              {Default: ir.IntentionDeny, Rules: []ir.IntentionRule{{Action: ir.IntentionAllow}}},
		"partial wildcard":       {Default: ir.IntentionDeny, Rules: []ir.IntentionRule{{Source: "w*", Action: ir.IntentionAllow}}},
		"no action":              {Default: ir.IntentionDeny, Rules: []ir.IntentionRule{{Source: "web"}}},
		"action and permissions": {Default: ir.IntentionDeny, Rules: []ir.IntentionRule{{Source: "web", Action: ir.IntentionAllow, Permissions: []ir.IntentionPermission{{Action: ir.IntentionAllow}}}}},
		"permission action":      {Default: ir.IntentionDeny, Rules: []ir.IntentionRule{{Source: "web", Permissions: []ir.IntentionPermission{{Action: "yes"}}}}},
		"bad regex":              {Default: ir.IntentionDeny, Rules: []ir.IntentionRule{{Source: "web", Permissions: []ir.IntentionPermission{{Action: ir.IntentionAllow, PathRegex: "(["}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := xds.HTTPRBAC(in); !errors.Is(err, xds.ErrIntention) {
				t.Errorf("HTTPRBAC: %v, want ErrIntention", err)
			}
		})
	}
}

// TestRBACRandom checks many generated intentions (fixed seed) against
// intention.Decide: precedence, exclusion and the default's handling in
// every combination the small vocabulary allows.
func TestRBACRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 1))
	actions := []ir.IntentionAction{ir.IntentionAllow, ir.IntentionDeny}
	permMenu := []ir.IntentionPermission{
		{PathPrefix: "/admin"},
		{PathExact: "/v1/items", Methods: []string{"GET", "POST"}},
		{PathRegex: "/v1/items/[0-9]+"},
		{Headers: []ir.IntentionHeader{{Name: "x-team", Prefix: "bl"}}},
		{Headers: []ir.IntentionHeader{{Name: "x-team", Present: true, Invert: true}}},
		{Headers: []ir.IntentionHeader{{Name: "x-team", Exact: "red", Invert: true}}},
		{Headers: []ir.IntentionHeader{{Name: "X-Team", Contains: "LU", IgnoreCase: true}}},
		{Methods: []string{"DELETE"}},
		{},
	}
	sources := append([]string{"*"}, testSources...)
	for n := range 400 {
		in := ir.Intentions{Default: actions[rng.IntN(2)]}
		http := n%2 == 0
		for range rng.IntN(5) {
			r := ir.IntentionRule{Source: sources[rng.IntN(len(sources))]}
			if http && rng.IntN(2) == 0 {
				for range 1 + rng.IntN(3) {
					p := permMenu[rng.IntN(len(permMenu))]
					p.Action = actions[rng.IntN(2)]
					r.Permissions = append(r.Permissions, p)
				}
			} else {
				r.Action = actions[rng.IntN(2)]
			}
			in.Rules = append(in.Rules, r)
		}
		checkAgainstDecide(t, in, http)
	}
}
