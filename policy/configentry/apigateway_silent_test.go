package configentry_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/configentry"
)

// These tests pin what an api-gateway and its http-route entries mean
// once translated: nothing an operator wrote is dropped without a note,
// and what is translated means what Consul means (JWT requirements the
// bridge cannot check fail closed).

// gwResult is an api-gateway's translation: its document, the policy the
// documents merge into, and the notes.
type gwResult struct {
	src   string
	pol   *policy.Policy
	notes []configentry.Note
}

// translateGW runs Checked (no entry may be rejected), parses and merges
// the documents as the bridge does, and returns the api-gateway's
// document.
func translateGW(t *testing.T, entries ...api.ConfigEntry) gwResult {
	t.Helper()
	var e configentry.Entries
	for _, entry := range entries {
		if err := e.Add(entry); err != nil {
			t.Fatal(err)
		}
	}
	docs, notes, rejected := configentry.Checked(e)
	if len(rejected) > 0 {
		t.Fatalf("rejected: %v", rejected)
	}
	var r gwResult
	var parsed []*policy.Document
	for _, d := range docs {
		if strings.HasPrefix(d.Name, configentry.DocPrefix+api.APIGateway+"/") {
			r.src = string(d.Source)
		}
		doc, diags := policy.ParseKV(d.Name, d.Source)
		if diags.HasErrors() {
			t.Fatalf("%s: %v\n%s", d.Name, diags, d.Source)
		}
		parsed = append(parsed, doc)
	}
	cfg, diags := policy.Merge(parsed...)
	if diags.HasErrors() {
		t.Fatalf("merge: %s\n%s", policy.FormatDiagnostics(diags), r.src)
	}
	r.pol, r.notes = cfg.Policy, notes
	return r
}

// routes are the routes of gateway gw's listener and virtual host, by
// position.
func (r gwResult) routes(t *testing.T, gw string, listener, vhost int) []*policy.Route {
	t.Helper()
	p := r.pol.ProxyFor(gw)
	if p == nil || len(p.Listeners) <= listener || len(p.Listeners[listener].VirtualHosts) <= vhost {
		t.Fatalf("no listener %d virtual host %d in proxy %q:\n%s", listener, vhost, gw, r.src)
	}
	return p.Listeners[listener].VirtualHosts[vhost].Routes
}

// note returns the first note at entry containing all of words.
func (r gwResult) note(entry string, words ...string) (configentry.Note, bool) {
	for _, n := range r.notes {
		if n.Entry != entry {
			continue
		}
		if !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(n.Text, w) }) {
			return n, true
		}
	}
	return configentry.Note{}, false
}

func (r gwResult) wantNote(t *testing.T, entry string, words ...string) {
	t.Helper()
	if _, ok := r.note(entry, words...); !ok {
		t.Errorf("no note at %s containing %q; notes:\n%v", entry, words, r.notes)
	}
}

func gateway(listeners ...api.APIGatewayListener) *api.APIGatewayConfigEntry {
	return &api.APIGatewayConfigEntry{Kind: api.APIGateway, Name: "gw", Listeners: listeners}
}

func httpListener(name, hostname string) api.APIGatewayListener {
	return api.APIGatewayListener{Name: name, Port: 8080, Protocol: "http", Hostname: hostname}
}

func route(name string, hostnames []string, rules ...api.HTTPRouteRule) *api.HTTPRouteConfigEntry {
	return &api.HTTPRouteConfigEntry{Kind: api.HTTPRoute, Name: name, Hostnames: hostnames,
		Parents: []api.ResourceReference{{Kind: api.APIGateway, Name: "gw"}}, Rules: rules}
}

func prefix(p string) []api.HTTPMatch {
	return []api.HTTPMatch{{Path: api.HTTPPathMatch{Match: api.HTTPPathMatchPrefix, Value: p}}}
}

func jwtProviders() []*api.APIGatewayJWTProvider {
	return []*api.APIGatewayJWTProvider{{Name: "okta"}}
}

// TestAPIGatewayJWTFailsClosed (item 1): a JWT requirement the bridge
// cannot check makes the routes it covers answer 403 instead of routing
// requests unchecked, with a note saying so and what to do; routes it
// does not cover keep routing.
func TestAPIGatewayJWTFailsClosed(t *testing.T) {
	policyJWT := &api.APIGatewayPolicy{JWT: &api.APIGatewayJWTRequirement{Providers: jwtProviders()}}
	open := api.HTTPRouteRule{Matches: prefix("/open"), Services: []api.HTTPService{{Name: "web"}}}
	closed := api.HTTPRouteRule{Matches: prefix("/api"), Services: []api.HTTPService{{Name: "api"}}}
	withDefault, withOverride := httpListener("http", ""), httpListener("http", "")
	withDefault.Default, withOverride.Override = policyJWT, policyJWT
	ruleJWT := closed
	ruleJWT.Filters.JWT = &api.JWTFilter{Providers: jwtProviders()}
	svcJWT := closed
	svcJWT.Services = []api.HTTPService{{Name: "api", Weight: 50}, {Name: "api2", Weight: 50, Filters: api.HTTPFilters{JWT: &api.JWTFilter{Providers: jwtProviders()}}}}
	for name, tc := range map[string]struct {
		listener api.APIGatewayListener
		rule     api.HTTPRouteRule
		// denied: which of the two rules' routes (open, closed) answer 403
		denied    [2]bool
		noteEntry string
		noteWords []string
	}{
		"listener Default":  {withDefault, closed, [2]bool{true, true}, "api-gateway/gw", []string{`listener "http"`, "JWT requirement", "not translated", "answers 403 rather than pass requests unchecked", "jwt_provider", "drop it from the entry", "serve this gateway with Consul"}},
		"listener Override": {withOverride, closed, [2]bool{true, true}, "api-gateway/gw", []string{`listener "http"`, "JWT requirement", "answers 403"}},
		"rule":              {httpListener("http", ""), ruleJWT, [2]bool{false, true}, "http-route/r", []string{"rule 1", "JWT requirement is not translated", "answer 403 rather than pass requests unchecked", "jwt_provider", "jwt block", "drop it from the entry", "serve the gateway with Consul"}},
		"service":           {httpListener("http", ""), svcJWT, [2]bool{false, true}, "http-route/r", []string{"rule 1", `service "api2"`, "JWT requirement", "answer 403 rather than pass requests unchecked", "jwt_provider"}},
	} {
		t.Run(name, func(t *testing.T) {
			r := translateGW(t, gateway(tc.listener), route("r", nil, open, tc.rule))
			routes := r.routes(t, "gw", 0, 0)
			if len(routes) != 2 {
				t.Fatalf("%d routes, want 2:\n%s", len(routes), r.src)
			}
			for i, rt := range routes {
				denied := rt.DirectResponse != nil && rt.DirectResponse.Status == 403 && len(rt.Targets) == 0
				if denied != tc.denied[i] {
					t.Errorf("route %d (%s): answers 403 = %v, want %v:\n%s", i, rt.Match.PathPrefix, denied, tc.denied[i], r.src)
				}
			}
			if !strings.Contains(r.src, "direct_response {\n          status = 403\n        }") {
				t.Errorf("document has no direct_response 403:\n%s", r.src)
			}
			r.wantNote(t, tc.noteEntry, tc.noteWords...)
		})
	}
}

// TestAPIGatewayExtAuthzNoted (item 1): ext_authz and ext_proc stay
// notes, now also gateway-wide and per service.
func TestAPIGatewayExtAuthzNoted(t *testing.T) {
	g := gateway(httpListener("http", ""))
	g.ExtAuthz = &api.APIGatewayExtAuthz{Enabled: false}
	r := translateGW(t, g, route("r", nil,
		api.HTTPRouteRule{Services: []api.HTTPService{{Name: "api", Filters: api.HTTPFilters{ExtAuthz: &api.HTTPRouteExtAuthzFilter{Enabled: true}}}}},
		api.HTTPRouteRule{Matches: prefix("/p"), Services: []api.HTTPService{{Name: "api", Filters: api.HTTPFilters{ExtProc: []api.ExtProcFilter{{Mode: "override"}}}}}},
		api.HTTPRouteRule{Matches: prefix("/q"), Filters: api.HTTPFilters{ExtAuthz: &api.HTTPRouteExtAuthzFilter{}}, Services: []api.HTTPService{{Name: "api"}}},
	))
	r.wantNote(t, "api-gateway/gw", "gateway-wide ext_authz", "not translated")
	r.wantNote(t, "http-route/r", "rule 0", "ext_authz and ext_proc", `service "api"`, "not translated")
	r.wantNote(t, "http-route/r", "rule 1", "ext_authz and ext_proc", `service "api"`, "not translated")
	r.wantNote(t, "http-route/r", "rule 2", "ext_authz and ext_proc filters are not translated")
	// They are notes, not 403s.
	for _, rt := range r.routes(t, "gw", 0, 0) {
		if rt.DirectResponse != nil {
			t.Errorf("route %s answers %d for an ext_authz/ext_proc filter", rt.Match.PathPrefix, rt.DirectResponse.Status)
		}
	}
}

// TestAPIGatewayPerServiceFiltersNoted (item 2): a service's retry,
// timeout and response header filters are noted like its request ones.
func TestAPIGatewayPerServiceFiltersNoted(t *testing.T) {
	for name, svc := range map[string]api.HTTPService{
		"RetryFilter":             {Name: "api", Filters: api.HTTPFilters{RetryFilter: &api.RetryFilter{NumRetries: 3}}},
		"TimeoutFilter":           {Name: "api", Filters: api.HTTPFilters{TimeoutFilter: &api.TimeoutFilter{RequestTimeout: time.Second}}},
		"ResponseFilters.Headers": {Name: "api", ResponseFilters: api.HTTPResponseFilters{Headers: []api.HTTPHeaderFilter{{Set: map[string]string{"x": "y"}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			r := translateGW(t, gateway(httpListener("http", "")), route("r", nil, api.HTTPRouteRule{Services: []api.HTTPService{svc}}))
			r.wantNote(t, "http-route/r", "rule 0: filters per service are not translated", name, `service "api"`)
		})
	}
}

// TestAPIGatewayListenerHostnameFiltersRoutes (item 3): a route's
// hostnames are those its listener's hostname admits, by Consul's rule
// (HTTPRouteConfigEntry.FilteredHostnames, agent/structs/
// config_entry_routes.go: a listener hostname with "*" admits any route
// hostname ending in what follows "*.", others only themselves); each
// one dropped is noted, and a route left with none is not served there.
func TestAPIGatewayListenerHostnameFiltersRoutes(t *testing.T) {
	for name, tc := range map[string]struct {
		listener string
		route    []string
		domains  []string // nil: the route is not served on the listener
		dropped  []string
	}{
		"no listener hostname admits all":              {"", []string{"a.example.com", "b.example.org"}, []string{"a.example.com", "b.example.org"}, nil},
		"route without hostnames takes the listener's": {"*.example.com", nil, []string{"*.example.com"}, nil},
		"wildcard listener":                            {"*.example.com", []string{"shop.example.com", "a.b.example.com", "shop.example.org"}, []string{"a.b.example.com", "shop.example.com"}, []string{"shop.example.org"}},
		// Consul's suffix test: the bare domain and any name ending in it
		// pass, as Consul serves them (pinned, not the Gateway API rule).
		"wildcard listener, Consul's suffix test": {"*.example.com", []string{"example.com", "badexample.com"}, []string{"badexample.com", "example.com"}, nil},
		"exact listener":       {"shop.example.com", []string{"shop.example.com", "www.example.com"}, []string{"shop.example.com"}, []string{"www.example.com"}},
		"no hostname admitted": {"*.public.example.com", []string{"shop.example.com"}, nil, []string{"shop.example.com"}},
	} {
		t.Run(name, func(t *testing.T) {
			// A second listener with a route of its own keeps the gateway
			// served when r is served nowhere.
			other := httpListener("other", "")
			other.Port = 9090
			oth := route("other", nil, api.HTTPRouteRule{Services: []api.HTTPService{{Name: "web"}}})
			oth.Parents[0].SectionName = "other"
			rt := route("r", tc.route, api.HTTPRouteRule{Services: []api.HTTPService{{Name: "api"}}})
			rt.Parents[0].SectionName = "http"
			r := translateGW(t, gateway(httpListener("http", tc.listener), other), oth, rt)
			var got []string
			for _, l := range r.pol.ProxyFor("gw").Listeners {
				for _, vh := range l.VirtualHosts {
					if l.Name == "http" {
						got = append(got, vh.Domains...)
					}
				}
			}
			if !slices.Equal(got, tc.domains) {
				t.Errorf("domains %q, want %q:\n%s", got, tc.domains, r.src)
			}
			for _, h := range tc.dropped {
				r.wantNote(t, "http-route/r", `hostname "`+h+`" is not admitted by listener "http"`)
			}
			if tc.domains == nil {
				r.wantNote(t, "http-route/r", "not served on that listener")
				if strings.Contains(r.src, `virtual_host "r"`) || strings.Contains(r.src, `listener "http"`) {
					t.Errorf("a route with no admitted hostname is served:\n%s", r.src)
				}
			}
			if len(tc.dropped) == 0 {
				if n, ok := r.note("http-route/r", "not admitted"); ok {
					t.Errorf("unexpected note %s", n)
				}
			}
		})
	}
}

// TestAPIGatewayListenerHostnamePerListener (item 3): a route attached to
// two listeners is served on the one whose hostname admits it only.
func TestAPIGatewayListenerHostnamePerListener(t *testing.T) {
	a, b := httpListener("a", "*.a.example.com"), httpListener("b", "*.b.example.com")
	b.Port = 8081
	r := translateGW(t, gateway(a, b), route("r", []string{"x.a.example.com"}, api.HTTPRouteRule{Services: []api.HTTPService{{Name: "api"}}}))
	// Listener b, with no route, is not served, as Consul serves only
	// listeners with routes.
	p := r.pol.ProxyFor("gw")
	if len(p.Listeners) != 1 || p.Listeners[0].Name != "a" || len(p.Listeners[0].VirtualHosts) != 1 {
		t.Fatalf("want the route on listener a only:\n%s", r.src)
	}
	r.wantNote(t, "http-route/r", `hostname "x.a.example.com" is not admitted by listener "b"`)
	r.wantNote(t, "api-gateway/gw", `http listener "b" has no http-route entry attached`, "not served")
}

// TestHTTPRouteRetryNotesNameTheRoute (item 4): a rule's retry notes name
// the http-route and its rule, not a service-router of the same name.
func TestHTTPRouteRetryNotesNameTheRoute(t *testing.T) {
	r := translateGW(t, gateway(httpListener("http", "")), route("r", nil, api.HTTPRouteRule{
		Filters:  api.HTTPFilters{RetryFilter: &api.RetryFilter{NumRetries: 2, RetryOnConnectFailure: true, RetryOnStatusCodes: []uint32{503}}},
		Services: []api.HTTPService{{Name: "api"}},
	}))
	r.wantNote(t, "http-route/r", "rule 0: retry_on_status_codes [503] is not translated")
	for _, n := range r.notes {
		if strings.HasPrefix(n.Entry, api.ServiceRouter+"/") {
			t.Errorf("note filed under a service-router that does not exist: %s", n)
		}
	}
	if rt := r.routes(t, "gw", 0, 0)[0]; rt.Retry == nil || rt.Retry.Attempts != 2 {
		t.Errorf("retry not translated: %+v", rt.Retry)
	}
}

// TestHTTPRouteHeaderFiltersMerged (item 5): several header filters of a
// rule are one change, merged in order as Consul's
// httpRouteFiltersToServiceRouteHeaderModifier does (Add and Set: a later
// filter's value for a header wins; Remove: all of them), instead of
// duplicate blocks that made the policy reject the whole gateway.
func TestHTTPRouteHeaderFiltersMerged(t *testing.T) {
	filters := []api.HTTPHeaderFilter{
		{Add: map[string]string{"x-a": "1", "x-both": "first"}, Set: map[string]string{"x-s": "first", "x-t": "t"}, Remove: []string{"x-r1"}},
		{Add: map[string]string{"x-b": "2", "x-both": "second"}, Set: map[string]string{"x-s": "second"}, Remove: []string{"x-r2", "x-r1"}},
	}
	r := translateGW(t, gateway(httpListener("http", "")), route("r", nil, api.HTTPRouteRule{
		Filters:         api.HTTPFilters{Headers: filters},
		ResponseFilters: api.HTTPResponseFilters{Headers: filters},
		Services:        []api.HTTPService{{Name: "api"}},
	}))
	if n := strings.Count(r.src, "request_headers {"); n != 1 {
		t.Errorf("%d request_headers blocks, want 1:\n%s", n, r.src)
	}
	rt := r.routes(t, "gw", 0, 0)[0]
	for name, h := range map[string]struct {
		Add, Set map[string]string
		Remove   []string
	}{"request": {rt.RequestHeaders.Add, rt.RequestHeaders.Set, rt.RequestHeaders.Remove}, "response": {rt.ResponseHeaders.Add, rt.ResponseHeaders.Set, rt.ResponseHeaders.Remove}} {
		if want := map[string]string{"x-a": "1", "x-b": "2", "x-both": "second"}; !maps.Equal(h.Add, want) {
			t.Errorf("%s add %v, want %v", name, h.Add, want)
		}
		if want := map[string]string{"x-s": "second", "x-t": "t"}; !maps.Equal(h.Set, want) {
			t.Errorf("%s set %v, want %v", name, h.Set, want)
		}
		got := slices.Sorted(slices.Values(h.Remove))
		if want := []string{"x-r1", "x-r2"}; !slices.Equal(got, want) {
			t.Errorf("%s remove %v, want %v", name, got, want)
		}
	}
}

// TestAPIGatewaySmallDropsNoted (item 6): settings with no equivalent
// are notes, not silence.
func TestAPIGatewaySmallDropsNoted(t *testing.T) {
	kb := uint32(96)
	three := 3
	svc := api.HTTPRouteRule{Services: []api.HTTPService{{Name: "api"}}}
	for name, tc := range map[string]struct {
		gw        func(*api.APIGatewayConfigEntry)
		rt        func(*api.HTTPRouteConfigEntry)
		entry     string
		noteWords []string
	}{
		"MaxRequestHeadersKB": {gw: func(g *api.APIGatewayConfigEntry) { g.Listeners[0].MaxRequestHeadersKB = &kb },
			entry: "api-gateway/gw", noteWords: []string{`listener "http"`, "MaxRequestHeadersKB 96", "not translated"}},
		"TLS versions without certificates": {gw: func(g *api.APIGatewayConfigEntry) {
			g.Listeners[0].TLS.MinVersion, g.Listeners[0].TLS.MaxVersion = "TLSv1_2", "TLSv1_3"
		}, entry: "api-gateway/gw", noteWords: []string{"min_version, max_version and cipher_suites", "not translated"}},
		"TLS cipher suites without certificates": {gw: func(g *api.APIGatewayConfigEntry) {
			g.Listeners[0].TLS.CipherSuites = []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}
		}, entry: "api-gateway/gw", noteWords: []string{"cipher_suites", "not translated"}},
		"gateway Defaults": {gw: func(g *api.APIGatewayConfigEntry) { g.Defaults = &api.UpstreamLimits{MaxConnections: &three} },
			entry: "api-gateway/gw", noteWords: []string{"defaults (upstream limits) are not translated"}},
		"service Limits": {rt: func(r *api.HTTPRouteConfigEntry) {
			r.Rules[0].Services[0].Limits = &api.UpstreamLimits{MaxConnections: &three}
		},
			entry: "http-route/r", noteWords: []string{"rule 0", "Limits", `service "api"`, "not translated"}},
		"service namespace": {rt: func(r *api.HTTPRouteConfigEntry) { r.Rules[0].Services[0].Namespace = "team" },
			entry: "http-route/r", noteWords: []string{`service "api" in namespace "team"`, "the bridge routes to the same-named service"}},
		"service partition": {rt: func(r *api.HTTPRouteConfigEntry) { r.Rules[0].Services[0].Partition = "part" },
			entry: "http-route/r", noteWords: []string{`service "api" in partition "part"`, "the bridge routes to the same-named service"}},
		"gateway TLS": {gw: func(g *api.APIGatewayConfigEntry) { g.TLS.TLSMinVersion = "TLSv1_2" },
			entry: "api-gateway/gw", noteWords: []string{"gateway TLS defaults are not translated"}},
		"service TLS": {rt: func(r *api.HTTPRouteConfigEntry) {
			r.Rules[0].Services[0].TLS = &api.GatewayServiceTLSConfig{SDS: &api.GatewayTLSSDSConfig{ClusterName: "sds"}}
		}, entry: "http-route/r", noteWords: []string{"rule 0", "TLS from SDS", `service "api"`, "not translated"}},
		"parent namespace": {rt: func(r *api.HTTPRouteConfigEntry) { r.Parents[0].Namespace = "team" },
			entry: "http-route/r", noteWords: []string{`parent "gw" in namespace "team"`, "the bridge attaches it"}},
	} {
		t.Run(name, func(t *testing.T) {
			g := gateway(httpListener("http", ""))
			r := route("r", nil, svc)
			r.Rules = []api.HTTPRouteRule{{Services: slices.Clone(svc.Services)}}
			if tc.gw != nil {
				tc.gw(g)
			}
			if tc.rt != nil {
				tc.rt(r)
			}
			res := translateGW(t, g, r)
			res.wantNote(t, tc.entry, tc.noteWords...)
		})
	}
	// The default namespace and partition say nothing.
	r := route("r", nil, svc)
	r.Rules = []api.HTTPRouteRule{{Services: []api.HTTPService{{Name: "api", Namespace: "default", Partition: "default"}}}}
	r.Parents[0].Namespace = "default"
	if res := translateGW(t, gateway(httpListener("http", "")), r); len(res.notes) > 0 {
		t.Errorf("notes for the default namespace and partition: %v", res.notes)
	}
}

// TestAPIGatewayTCPRouteDropsNoted (item 6): a tcp-route's service
// limits and namespace are notes.
func TestAPIGatewayTCPRouteDropsNoted(t *testing.T) {
	three := 3
	g := gateway(api.APIGatewayListener{Name: "pg", Port: 6432, Protocol: "tcp"})
	tr := &api.TCPRouteConfigEntry{Kind: api.TCPRoute, Name: "pg", Parents: []api.ResourceReference{{Kind: api.APIGateway, Name: "gw"}},
		Services: []api.TCPService{{Name: "db", Namespace: "data", Limits: &api.UpstreamLimits{MaxConnections: &three}}}}
	r := translateGW(t, g, tr)
	r.wantNote(t, "tcp-route/pg", `service "db" in namespace "data"`, "the bridge routes to the same-named service")
	r.wantNote(t, "tcp-route/pg", `service "db"`, "Limits", "not translated")
}

// TestAPIGatewayRuleTranslation: the translation the shop golden covered
// before its route's hostname stopped matching its listener's (it never
// matched in Consul): matches, weights, timeout, retry, rewrite, headers.
func TestAPIGatewayRuleTranslation(t *testing.T) {
	rt := route("shop", []string{"shop.example.com"}, api.HTTPRouteRule{
		Matches: []api.HTTPMatch{{Path: api.HTTPPathMatch{Match: api.HTTPPathMatchPrefix, Value: "/api/"}, Method: "GET",
			Headers: []api.HTTPHeaderMatch{{Match: api.HTTPHeaderMatchSuffix, Name: "x-env", Value: ".prod"}},
			Query:   []api.HTTPQueryMatch{{Match: api.HTTPQueryMatchPresent, Name: "debug"}}}},
		Services: []api.HTTPService{{Name: "api", Weight: 80}, {Name: "billing", Weight: 20}},
		Filters: api.HTTPFilters{URLRewrite: &api.URLRewrite{Path: "/"}, TimeoutFilter: &api.TimeoutFilter{RequestTimeout: 5 * time.Second},
			RetryFilter: &api.RetryFilter{NumRetries: 2, RetryOnConnectFailure: true}, Headers: []api.HTTPHeaderFilter{{Set: map[string]string{"x-gw": "public"}}}},
	})
	r := translateGW(t, gateway(httpListener("http", "*.example.com")), rt)
	want := `      route {
        match {
          path_prefix = "/api/"
          method      = "GET"
          header "x-env" {
            regex = ".*\\.prod"
          }
          query "debug" {
            present = true
          }
        }
        split {
          service = "api"
          weight  = 80
        }
        split {
          service = "billing"
          weight  = 20
        }
        timeout = "5s"
        retry {
          attempts = 2
          on       = ["connect-failure"]
        }
        rewrite {
          prefix = "/"
        }
        request_headers {
          set = {
            x-gw = "public"
          }
        }
      }`
	if !strings.Contains(r.src, want) {
		t.Errorf("document lacks the translated rule:\n%s\nwant:\n%s", r.src, want)
	}
	if len(r.notes) > 0 {
		t.Errorf("notes for a fully translated rule: %v", r.notes)
	}
}

// TestAPIGatewayTLSFailsClosed: Consul serves an api-gateway listener
// with certificates (or an SDS certificate) with TLS. The bridge cannot
// serve those from the entries, so the listener is not served rather
// than answer in plain text what Consul answers only over TLS; the
// gateway's other listeners are, and a gateway left with none is no
// proxy group (its proxies get no listeners), each with a note.
func TestAPIGatewayTLSFailsClosed(t *testing.T) {
	tlsL := httpListener("https", "")
	tlsL.Port = 8443
	tlsL.TLS.Certificates = []api.ResourceReference{{Kind: api.InlineCertificate, Name: "shop-cert"}}
	sdsL := httpListener("sds", "")
	sdsL.Port = 9443
	sdsL.TLS.SDS = &api.GatewayTLSSDSConfig{ClusterName: "sds", CertResource: "edge-cert"}
	svc := api.HTTPRouteRule{Services: []api.HTTPService{{Name: "api"}}}
	r := translateGW(t, gateway(httpListener("http", ""), tlsL, sdsL), route("r", nil, svc))
	r.wantNote(t, "api-gateway/gw", `listener "https": Consul serves it with TLS (certificates inline-certificate/shop-cert)`, "not served rather than serve plain text")
	r.wantNote(t, "api-gateway/gw", `listener "sds": Consul serves it with TLS (the SDS certificate "edge-cert")`)
	var served []string
	for _, l := range r.pol.ProxyFor("gw").Listeners {
		served = append(served, l.Name)
	}
	if !slices.Equal(served, []string{"http"}) {
		t.Errorf("listeners served %v, want [http] (the TLS ones not in plain text):\n%s", served, r.src)
	}

	r = translateGW(t, gateway(tlsL), route("r", nil, svc))
	if p := r.pol.ProxyFor("gw"); p != nil && len(p.Listeners) > 0 {
		t.Errorf("a gateway whose only listener is TLS serves %v in plain text:\n%s", p.Listeners, r.src)
	}
	r.wantNote(t, "api-gateway/gw", "no listener of the gateway is served")
}
