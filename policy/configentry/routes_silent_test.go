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

// Nothing an operator wrote in Consul is dropped silently: what the
// bridge cannot translate is a note, and what it translates means what
// Consul 1.15 means (agent/xds/routes.go and
// agent/consul/discoverychain/compile.go are the reference).

// translated is what entries become through Checked, as the bridge
// loads them: the documents' source, the merged policy and the notes.
type translated struct {
	src   string
	pol   *policy.Policy
	notes []configentry.Note
}

func translate(t *testing.T, mesh bool, entries ...api.ConfigEntry) translated {
	t.Helper()
	e := configentry.Entries{Mesh: mesh}
	for _, c := range entries {
		if err := e.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	docs, notes, rejected := configentry.Checked(e)
	if len(rejected) > 0 {
		t.Fatalf("entries rejected: %v", rejected)
	}
	var src strings.Builder
	var parsed []*policy.Document
	for _, d := range docs {
		src.WriteString("# " + d.Name + "\n" + string(d.Source))
		doc, diags := policy.ParseKV(d.Name, d.Source)
		if diags.HasErrors() {
			t.Fatalf("%s: %v\n%s", d.Name, diags, d.Source)
		}
		parsed = append(parsed, doc)
	}
	if mesh {
		m, _ := policy.Parse("mesh", []byte("mesh {}\n"))
		parsed = append(parsed, m)
	}
	cfg, diags := policy.Merge(parsed...)
	if diags.HasErrors() {
		t.Fatalf("%v\n%s", policy.FormatDiagnostics(diags), src.String())
	}
	return translated{src: src.String(), pol: cfg.Policy, notes: notes}
}

func (r translated) note(entry, text string) bool {
	return slices.ContainsFunc(r.notes, func(n configentry.Note) bool {
		return n.Entry == entry && strings.Contains(n.Text, text)
	})
}

func (r translated) wantNote(t *testing.T, entry, text string) {
	t.Helper()
	if !r.note(entry, text) {
		t.Errorf("no note for %s containing %q; notes:\n%s", entry, text, r.notesText())
	}
}

func (r translated) noNote(t *testing.T, text string) {
	t.Helper()
	for _, n := range r.notes {
		if strings.Contains(n.Text, text) {
			t.Errorf("unexpected note %s", n)
		}
	}
}

func (r translated) notesText() string {
	var b strings.Builder
	for _, n := range r.notes {
		b.WriteString("  " + n.String() + "\n")
	}
	return b.String()
}

// vhostRoutes are the routes of ingress gateway gw's virtual host for svc.
func (r translated) vhostRoutes(t *testing.T, gw, svc string) []*policy.Route {
	t.Helper()
	for _, p := range r.pol.Proxies {
		if p.Name != gw {
			continue
		}
		for _, l := range p.Listeners {
			for _, vh := range l.VirtualHosts {
				if vh.Name == svc {
					return vh.Routes
				}
			}
		}
	}
	t.Fatalf("no virtual host %q in proxy %q:\n%s", svc, gw, r.src)
	return nil
}

func (r translated) grpcRoutes(t *testing.T, svc string) []*policy.Route {
	t.Helper()
	for _, g := range r.pol.GRPCServices {
		if g.Name == svc {
			return g.Routes
		}
	}
	t.Fatalf("no grpc_service %q:\n%s", svc, r.src)
	return nil
}

func httpDefaults(name, protocol string) *api.ServiceConfigEntry {
	return &api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: name, Protocol: protocol}
}

func ingress(name string, listeners ...api.IngressListener) *api.IngressGatewayConfigEntry {
	return &api.IngressGatewayConfigEntry{Kind: api.IngressGateway, Name: name, Listeners: listeners}
}

func router(name string, routes ...api.ServiceRoute) *api.ServiceRouterConfigEntry {
	return &api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: name, Routes: routes}
}

func prefixRoute(prefix string, d *api.ServiceRouteDestination) api.ServiceRoute {
	return api.ServiceRoute{Match: &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{PathPrefix: prefix}}, Destination: d}
}

// TestRetryOnlyWhatConsulRetries (item 1): Consul's
// getRetryPolicyForDestination joins RetryOn, connect-failure (once) and
// retriable-status-codes into retry_on; NumRetries is only the count. So
// NumRetries alone retries nothing (no retry here, and a note), status
// codes alone are a note and no retry (not 5xx), and the conditions that
// are there are kept exactly.
func TestRetryOnlyWhatConsulRetries(t *testing.T) {
	for name, tc := range map[string]struct {
		d        api.ServiceRouteDestination
		wantOn   []string // nil: no retry
		attempts uint32
		note     string
	}{
		"num_retries alone": {d: api.ServiceRouteDestination{NumRetries: 3},
			note: "route 0: num_retries 3 without retry_on, retry_on_connect_failure or retry_on_status_codes retries nothing in Consul either"},
		"status codes alone": {d: api.ServiceRouteDestination{NumRetries: 2, RetryOnStatusCodes: []uint32{503}},
			note: "route 0: retry_on_status_codes [503] is not translated (the policy's retry cannot name status codes); no retry on them is set"},
		"status codes and 5xx": {d: api.ServiceRouteDestination{NumRetries: 2, RetryOn: []string{"5xx"}, RetryOnStatusCodes: []uint32{429}},
			wantOn: []string{"5xx"}, attempts: 2, note: "retry_on_status_codes [429] is not translated"},
		"connect failure twice": {d: api.ServiceRouteDestination{NumRetries: 4, RetryOn: []string{"reset", "connect-failure"}, RetryOnConnectFailure: true},
			wantOn: []string{"reset", "connect-failure"}, attempts: 4},
		"connect failure alone, Envoy's one retry": {d: api.ServiceRouteDestination{RetryOnConnectFailure: true},
			wantOn: []string{"connect-failure"}, attempts: 1},
	} {
		t.Run(name, func(t *testing.T) {
			d := tc.d
			d.Service = "api"
			r := translate(t, false,
				httpDefaults("web", "http"), httpDefaults("api", "http"),
				router("web", prefixRoute("/api/", &d)),
				ingress("edge", api.IngressListener{Port: 80, Protocol: "http", Services: []api.IngressService{{Name: "web"}}}))
			rt := r.vhostRoutes(t, "edge", "web")[0]
			switch {
			case tc.wantOn == nil && rt.Retry != nil:
				t.Errorf("retry %+v, want none (nothing Consul retries on is expressible)", rt.Retry)
			case tc.wantOn != nil && (rt.Retry == nil || !slices.Equal(rt.Retry.On, tc.wantOn) || rt.Retry.Attempts != tc.attempts):
				t.Errorf("retry %+v, want %d attempts on %v", rt.Retry, tc.attempts, tc.wantOn)
			}
			if tc.note != "" {
				r.wantNote(t, "service-router/web", tc.note)
			} else if len(r.notes) > 0 {
				t.Errorf("notes for a retry Consul means as written:\n%s", r.notesText())
			}
		})
	}
	t.Run("grpc num_retries alone", func(t *testing.T) {
		r := translate(t, false, httpDefaults("echo", "grpc"),
			router("echo", prefixRoute("/echo.Echo/", &api.ServiceRouteDestination{NumRetries: 2})))
		if rt := r.grpcRoutes(t, "echo")[0]; rt.Retry != nil {
			t.Errorf("grpc_service route retries %+v; Consul retries nothing", rt.Retry)
		}
		r.wantNote(t, "service-router/echo", "num_retries 2 without retry_on")
	})
}

// TestIngressTLSFailsClosed: Consul serves an ingress listener with TLS
// when the gateway or the listener enables it or names an SDS
// certificate, and a service with its own SDS certificate on a TLS
// filter chain of its own. The bridge cannot serve those certificates
// from the entries, so rather than answer in plain text what Consul
// answers only over TLS, such a listener (and such a service's hosts)
// is not served, with a note saying so and what to write instead.
// TLS versions or ciphers alone turn nothing on, in Consul as here.
func TestIngressTLSFailsClosed(t *testing.T) {
	sds := func(cert string) *api.GatewayTLSSDSConfig {
		return &api.GatewayTLSSDSConfig{ClusterName: "sds", CertResource: cert}
	}
	r := translate(t, false, ingress("edge",
		api.IngressListener{Port: 8443, Protocol: "http", TLS: &api.GatewayTLSConfig{Enabled: true, TLSMinVersion: "TLSv1_2"},
			Services: []api.IngressService{{Name: "web"}}},
		api.IngressListener{Port: 8444, Protocol: "tcp", TLS: &api.GatewayTLSConfig{SDS: sds("edge-cert")},
			Services: []api.IngressService{{Name: "db"}}},
		api.IngressListener{Port: 9443, Protocol: "http", TLS: &api.GatewayTLSConfig{CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}},
			Services: []api.IngressService{{Name: "api", Hosts: []string{"api.example.com"}, TLS: &api.GatewayServiceTLSConfig{SDS: sds("api-cert")}}, {Name: "shop"}}},
		api.IngressListener{Port: 9444, Protocol: "http",
			Services: []api.IngressService{{Name: "admin", Hosts: []string{"admin.example.com"}, TLS: &api.GatewayServiceTLSConfig{SDS: sds("admin-cert")}}}},
		api.IngressListener{Port: 80, Protocol: "http", TLS: &api.GatewayTLSConfig{}, Services: []api.IngressService{{Name: "plain"}}},
	))
	r.wantNote(t, "ingress-gateway/edge", "listener 8443: Consul serves it with TLS (enabled on the listener)")
	r.wantNote(t, "ingress-gateway/edge", `listener 8444: Consul serves it with TLS (the listener's SDS certificate "edge-cert")`)
	r.wantNote(t, "ingress-gateway/edge", `listener 9443: service "api": Consul serves it with TLS only (its SDS certificate "api-cert")`)
	r.wantNote(t, "ingress-gateway/edge", `listener 9444: service "admin": Consul serves it with TLS only`)
	r.wantNote(t, "ingress-gateway/edge", "listener 9444: no service of it is served")
	r.noNote(t, "listener 80:")
	r.noNote(t, "listener 9443: Consul serves it")
	served := map[string][]string{}
	for _, l := range r.pol.Proxies[0].Listeners {
		if l.TLS != nil {
			t.Errorf("listener %s has TLS %+v without certificates", l.Name, l.TLS)
		}
		for _, vh := range l.VirtualHosts {
			served[l.Name] = append(served[l.Name], vh.Name)
		}
		if len(l.VirtualHosts) == 0 {
			served[l.Name] = nil
		}
	}
	want := map[string][]string{"port-9443": {"shop"}, "port-80": {"plain"}}
	if !maps.EqualFunc(served, want, slices.Equal) {
		t.Errorf("served listeners and virtual hosts %v, want %v:\n%s", served, want, r.src)
	}

	// The gateway's TLS reaches every listener; a listener cannot turn
	// it off (false is Consul's zero value).
	r = translate(t, false, &api.IngressGatewayConfigEntry{Kind: api.IngressGateway, Name: "edge", TLS: api.GatewayTLSConfig{Enabled: true},
		Listeners: []api.IngressListener{
			{Port: 8080, Protocol: "http", TLS: &api.GatewayTLSConfig{Enabled: false}, Services: []api.IngressService{{Name: "web"}}},
			{Port: 9090, Protocol: "http", Services: []api.IngressService{{Name: "api"}}},
		}})
	r.wantNote(t, "ingress-gateway/edge", "listener 8080: Consul serves it with TLS (enabled on the gateway)")
	r.wantNote(t, "ingress-gateway/edge", "listener 9090: Consul serves it with TLS (enabled on the gateway)")
	for _, p := range r.pol.Proxies {
		if p.Name == "edge" && len(p.Listeners) > 0 {
			t.Errorf("listeners served in plain text where Consul serves TLS: %v\n%s", p.Listeners, r.src)
		}
	}
}

// TestIngressServiceHeadersNoted (item 3): Consul sets an ingress
// service's header changes on its virtual host; the policy's virtual_host
// has none, so they are a note (the routes are not given them).
func TestIngressServiceHeadersNoted(t *testing.T) {
	r := translate(t, false, ingress("edge", api.IngressListener{Port: 80, Protocol: "http", Services: []api.IngressService{{Name: "web",
		RequestHeaders:  &api.HTTPHeaderModifiers{Set: map[string]string{"x-gw": "edge"}},
		ResponseHeaders: &api.HTTPHeaderModifiers{Remove: []string{"server"}}}}}))
	r.wantNote(t, "ingress-gateway/edge", `listener 80: service "web": request_headers and response_headers (Consul sets them on the virtual host) are not translated`)
}

// TestOtherNamespaceNoted (item 4): Consul routes to the service of
// another namespace or partition; the bridge reaches the same-named one
// it reads, so each such reference is a note, and a legacy failover in
// another namespace is dropped as a failover target there is. "default"
// is the default, not another namespace.
func TestOtherNamespaceNoted(t *testing.T) {
	r := translate(t, false,
		httpDefaults("web", "http"), httpDefaults("api", "http"),
		&api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: "api", Splits: []api.ServiceSplit{
			{Weight: 50}, {Weight: 50, Service: "api-next", Namespace: "team"}}},
		router("web", prefixRoute("/api/", &api.ServiceRouteDestination{Service: "api", Partition: "p1"}),
			prefixRoute("/same/", &api.ServiceRouteDestination{Service: "api", Namespace: "default", Partition: "default"})),
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "db",
			Failover: map[string]api.ServiceResolverFailover{"*": {Service: "db", Namespace: "backup", Datacenters: []string{"dc2"}}}},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "cache", Namespace: "team"},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "queue", Namespace: "default", Partition: "default"},
		ingress("edge", api.IngressListener{Port: 80, Protocol: "http", Services: []api.IngressService{{Name: "web"}, {Name: "billing", Namespace: "finance"}}},
			api.IngressListener{Port: 5432, Protocol: "tcp", Services: []api.IngressService{{Name: "pg", Partition: "data"}}}))
	r.wantNote(t, "service-splitter/api", `split to "api-next": a service in another namespace or partition (namespace "team") is not translated`)
	r.wantNote(t, "service-router/web", `route 0: a destination in another namespace or partition (partition "p1") is not translated; the route goes to the same-named service "api"`)
	r.noNote(t, "route 1: a destination")
	r.wantNote(t, "service-resolver/db", `failover "*": a target in a peer, partition or namespace (namespace "backup") is not translated; failover dropped`)
	if got := r.pol.Service("db").FailoverFor(""); len(got) > 0 || len(r.pol.Service("db").FailoverDatacenters) > 0 {
		t.Errorf("db fails over to %v / %v: db in dc2's default namespace, not Consul's target", got, r.pol.Service("db").FailoverDatacenters)
	}
	r.wantNote(t, "service-resolver/cache", `the entry is in another namespace or partition (namespace "team"), which is not translated`)
	if r.note("service-resolver/queue", "namespace") {
		t.Errorf("namespace \"default\" noted:\n%s", r.notesText())
	}
	r.wantNote(t, "ingress-gateway/edge", `listener 80: service "billing" in another namespace or partition (namespace "finance") is not translated`)
	r.wantNote(t, "ingress-gateway/edge", `listener 5432: service "pg" in another namespace or partition (partition "data") is not translated`)
}

// TestIngressServiceLimitsNoted (item 5): an ingress service's limits
// and passive health check are about the gateway's own cluster; a service
// block's circuit_breaker would apply to every caller, so they are noted
// (http and tcp listeners), not written.
func TestIngressServiceLimitsNoted(t *testing.T) {
	n := uint32(10)
	r := translate(t, false, ingress("edge",
		api.IngressListener{Port: 80, Protocol: "http", Services: []api.IngressService{{Name: "web", MaxConnections: &n, MaxConcurrentRequests: &n}}},
		api.IngressListener{Port: 5432, Protocol: "tcp", Services: []api.IngressService{{Name: "pg", MaxPendingRequests: &n, PassiveHealthCheck: &api.PassiveHealthCheck{MaxFailures: 3}}}}))
	r.wantNote(t, "ingress-gateway/edge", `listener 80: service "web": upstream limits (max_connections, max_concurrent_requests) are not translated`)
	r.wantNote(t, "ingress-gateway/edge", `listener 5432: service "pg": upstream limits (max_pending_requests, passive_health_check) are not translated`)
	if strings.Contains(r.src, "circuit_breaker") {
		t.Errorf("a circuit_breaker for every caller was written:\n%s", r.src)
	}
}

// TestTCPRedirectNoted (item 6): a TCP service's redirect has no chain
// block to carry it, so routes in HCL to the service reach the service
// itself: noted as default_subset is. An HTTP service's chain carries it.
func TestTCPRedirectNoted(t *testing.T) {
	r := translate(t, false,
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "db", Redirect: &api.ServiceResolverRedirect{Service: "db-new"}},
		httpDefaults("web", "http"),
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "web", Redirect: &api.ServiceResolverRedirect{Service: "web-new"}})
	r.wantNote(t, "service-resolver/db", `redirect to "db-new": the routes made from entries follow it; routes in HCL naming db reach db itself (a tcp service has no chain block to carry it)`)
	if r.note("service-resolver/web", "redirect to") {
		t.Errorf("web's redirect is carried by its chain, yet noted:\n%s", r.notesText())
	}
	if c := r.pol.ChainFor("web"); c == nil || c.Routes[len(c.Routes)-1].Targets[0].Service != "web-new" {
		t.Errorf("web's chain does not redirect to web-new:\n%s", r.src)
	}
}

// TestGRPCRouteDropsNoted (item 7): a grpc_service route (proxyless
// gRPC) drops an idle timeout, retry_on_connect_failure and retry
// conditions that are not gRPC status codes, each with a note; the
// gRPC conditions are matched exactly, not as substrings.
func TestGRPCRouteDropsNoted(t *testing.T) {
	r := translate(t, false, httpDefaults("echo", "grpc"),
		router("echo", prefixRoute("/echo.Echo/", &api.ServiceRouteDestination{NumRetries: 2, IdleTimeout: time.Minute,
			RetryOnConnectFailure: true, RetryOn: []string{"5xx", "unavailable", "reset"}})))
	rt := r.grpcRoutes(t, "echo")[0]
	if rt.Retry == nil || !slices.Equal(rt.Retry.On, []string{"unavailable"}) || rt.Retry.Attempts != 2 {
		t.Errorf("grpc retry %+v, want 2 attempts on unavailable", rt.Retry)
	}
	r.wantNote(t, "service-router/echo", "route 0: idle_timeout does not apply to gRPC")
	r.wantNote(t, "service-router/echo", "route 0: retry_on_connect_failure: gRPC's xDS client retries only on status codes; dropped")
	r.wantNote(t, "service-router/echo", `route 0: retry_on ["5xx" "reset"]: gRPC's xDS client retries only on status codes`)
	// The chain (Envoy proxies) keeps them all.
	if c := r.pol.ChainFor("echo"); c == nil || c.Routes[0].IdleTimeout != time.Minute || !slices.Equal(c.Routes[0].Retry.On, []string{"5xx", "unavailable", "reset", "connect-failure"}) {
		t.Errorf("echo's chain route lost what Envoy runs:\n%s", r.src)
	}

	// Exact matching: a condition that is only part of a gRPC one (which
	// Consul's validation refuses, but nothing here relies on it) is not
	// gRPC's.
	var e configentry.Entries
	_ = e.Add(httpDefaults("echo", "grpc"))
	_ = e.Add(router("echo", prefixRoute("/", &api.ServiceRouteDestination{NumRetries: 1, RetryOn: []string{"unavail", ""}})))
	docs, notes := configentry.ToHCL(e)
	for _, d := range docs {
		src := string(d.Source)
		if i := strings.Index(src, `grpc_service "echo"`); i >= 0 && strings.Contains(src[i:], "retry") {
			t.Errorf("grpc_service retries on a partial condition:\n%s", src[i:])
		}
	}
	if !slices.ContainsFunc(notes, func(n configentry.Note) bool { return strings.Contains(n.Text, `retry_on ["unavail" ""]`) }) {
		t.Errorf("no note for the partial conditions: %v", notes)
	}
}

// TestOnlyPassingEverySubsetNoted (item 8): only_passing on every subset
// becomes the service's, which also reaches traffic to no subset and
// failover: a note says so.
func TestOnlyPassingEverySubsetNoted(t *testing.T) {
	r := translate(t, false, &api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", Subsets: map[string]api.ServiceResolverSubset{
		"v1": {Filter: `"v1" in Service.Tags`, OnlyPassing: true}, "v2": {Filter: `"v2" in Service.Tags`, OnlyPassing: true}}})
	if !r.pol.Service("api").OnlyPassing {
		t.Errorf("only_passing not set")
	}
	r.wantNote(t, "service-resolver/api", "only_passing is set on every subset; the bridge applies it to the whole service, so traffic to api without a subset and failover to it also skip instances whose checks warn")
}

// TestResolverRequestTimeoutScope (item 9): Consul's
// makeUpstreamRouteForDiscoveryChain gives a resolver's RequestTimeout
// only to a chain that starts at a resolver (no router, no splitter), and
// that resolver is the one after redirects (compile.go getResolverNode).
func TestResolverRequestTimeoutScope(t *testing.T) {
	timeouts := func(rs []*policy.Route) []time.Duration {
		var out []time.Duration
		for _, rt := range rs {
			out = append(out, rt.Timeout)
		}
		return out
	}
	resolver := func(name string, timeout time.Duration, redirect string) *api.ServiceResolverConfigEntry {
		r := &api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: name, RequestTimeout: timeout}
		if redirect != "" {
			r.Redirect = &api.ServiceResolverRedirect{Service: redirect}
		}
		return r
	}
	edge := ingress("edge", api.IngressListener{Port: 80, Protocol: "http", Services: []api.IngressService{{Name: "web"}}})
	t.Run("router", func(t *testing.T) {
		r := translate(t, false, edge, httpDefaults("web", "http"), httpDefaults("api", "http"), resolver("web", 7*time.Second, ""),
			router("web", prefixRoute("/api/", &api.ServiceRouteDestination{Service: "api"}), prefixRoute("/slow/", &api.ServiceRouteDestination{RequestTimeout: time.Second})))
		if got, want := timeouts(r.vhostRoutes(t, "edge", "web")), []time.Duration{0, time.Second, 0}; !slices.Equal(got, want) {
			t.Errorf("route timeouts %v, want %v (the destination's own only)", got, want)
		}
		r.wantNote(t, "service-resolver/web", "request_timeout: Consul applies it only where the discovery chain starts at the resolver; web has a service-router or service-splitter, so none of its routes gets it")
	})
	t.Run("splitter", func(t *testing.T) {
		r := translate(t, false, edge, httpDefaults("web", "http"), resolver("web", 7*time.Second, ""),
			&api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: "web", Splits: []api.ServiceSplit{{Weight: 100}}})
		if got := timeouts(r.vhostRoutes(t, "edge", "web")); !slices.Equal(got, []time.Duration{0}) {
			t.Errorf("split catch-all timeouts %v, want none", got)
		}
	})
	t.Run("resolver alone", func(t *testing.T) {
		r := translate(t, false, edge, httpDefaults("web", "http"), resolver("web", 7*time.Second, ""))
		if got := timeouts(r.vhostRoutes(t, "edge", "web")); !slices.Equal(got, []time.Duration{7 * time.Second}) {
			t.Errorf("timeouts %v, want 7s", got)
		}
		// The chain starts at the resolver: web gets a chain block (its
		// sidecars' upstream route carries the timeout, as Consul's:
		// TestMeshRetriesAndTimeoutsMatchConsulXDS).
		if c := r.pol.ChainFor("web"); c == nil || c.Routes[0].Timeout != 7*time.Second {
			t.Errorf("web has no chain with the resolver's 7s:\n%s", r.src)
		}
		r.wantNote(t, "service-resolver/web", "request_timeout is the timeout of web's chain")
	})
	t.Run("redirected", func(t *testing.T) {
		r := translate(t, false, edge, httpDefaults("web", "http"), httpDefaults("api", "http"), resolver("web", time.Second, "api"), resolver("api", 7*time.Second, ""))
		if got := timeouts(r.vhostRoutes(t, "edge", "web")); !slices.Equal(got, []time.Duration{7 * time.Second}) {
			t.Errorf("timeouts %v, want api's 7s (the chain's start resolver after the redirect)", got)
		}
		if c := r.pol.ChainFor("web"); c == nil || c.Routes[0].Timeout != 7*time.Second {
			t.Errorf("web's chain has not api's timeout:\n%s", r.src)
		}
		r.wantNote(t, "service-resolver/web", "request_timeout: the chain starts at the redirect's target, whose resolver's request_timeout applies instead")
	})
}

// TestServiceDefaultsSettingsNoted (item 10).
func TestServiceDefaultsSettingsNoted(t *testing.T) {
	kb := uint32(96)
	r := translate(t, false, &api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http",
		BalanceInboundConnections: "exact_balance", MaxRequestHeadersKB: &kb, ExternalSNI: "api.example.com"})
	for _, s := range []string{"balance_inbound_connections", "max_request_headers_kb", "external_sni"} {
		r.wantNote(t, "service-defaults/api", s+": service mesh setting, not translated")
	}
}
