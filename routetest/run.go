package routetest

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/routetest/routematch"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// EnvoyDefaultTimeout is the timeout Envoy applies to a route that sets
// none.
const EnvoyDefaultTimeout = 15 * time.Second

// Result is the outcome of one test.
type Result struct {
	Test *Test
	// RouteConfig is the RDS route configuration the request was
	// evaluated against ("" when the test's proxy or listener is not
	// found).
	RouteConfig string
	// VirtualHost is the name of the selected virtual host, "" for none.
	VirtualHost string
	// Route is the matched route's policy location ("file:line:col"),
	// "" when no route matched.
	Route string
	// Got describes what the request got: `cluster "api"`, `split {...}`,
	// `redirect 301 to "..."`, `direct response 200`, `no route (404)`.
	Got string
	// Failures are the expectations that did not hold, in source order.
	Failures []Failure
}

// Passed reports whether every expectation held.
func (r *Result) Passed() bool { return len(r.Failures) == 0 }

// Failure is one expectation that did not hold.
type Failure struct {
	// Subject is where the expectation (or the proxy or listener
	// attribute) is written.
	Subject hcl.Range
	// Message reads "NAME: expected X, got Y".
	Message string
}

// Run translates the policy (with the catalog; nil for none) as the bridge
// would and evaluates every test against it. Diagnostics report what stops
// tests from running at all: a translation error, or endpoint
// expectations without a catalog.
func Run(pol *policy.Policy, cat *consul.Catalog, tests []*Test) ([]*Result, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	if cat == nil {
		for _, t := range tests {
			if rng, ok := t.needsCatalog(); ok {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Catalog fixture needed",
					Detail:   "Expectations on endpoints count the instances of a catalog; pass one (Consul API JSON) with -catalog FILE.",
					Subject:  rng.Ptr(),
				})
			}
		}
		if diags.HasErrors() {
			return nil, diags
		}
	}
	w, err := pipeline.Compute(pipeline.Input{Catalog: cat, Policy: pol}, nil)
	// What the bridge would refuse to serve is no world to test: a group
	// that cannot be translated has no routes (tests of it crashed), and
	// tests of the other groups would pass for a policy the bridge rejects.
	if ds := pipeline.Diagnose(w, err, pol); ds.HasErrors() {
		return nil, ds
	}
	e := newEnv(pol, w.Model, w.Output)
	results := make([]*Result, 0, len(tests))
	for _, t := range tests {
		results = append(results, e.run(t))
	}
	return results, diags
}

func newEnv(pol *policy.Policy, m *ir.Model, out *xds.Output) *env {
	e := &env{pol: pol, model: m, out: out, eds: map[string]*endpointv3.ClusterLoadAssignment{}, sources: routeSources(m)}
	for _, cla := range out.Shared.Endpoints {
		e.eds[cla.GetClusterName()] = cla
	}
	return e
}

type env struct {
	pol   *policy.Policy
	model *ir.Model
	out   *xds.Output
	eds   map[string]*endpointv3.ClusterLoadAssignment
	// sources maps route configuration + "\x00" + route name to where the
	// policy declares the route (names carry no source location).
	sources map[string]string
}

// routeSources indexes the source location of every route of the model.
func routeSources(m *ir.Model) map[string]string {
	out := map[string]string{}
	add := func(listeners []ir.Listener) {
		for _, l := range listeners {
			for _, vh := range l.VirtualHosts {
				for _, r := range vh.Routes {
					out[l.Name+"\x00"+r.Name] = r.Source
				}
			}
		}
	}
	for _, g := range m.Groups {
		add(g.Listeners)
		if g.Sidecar != nil {
			add(g.Sidecar.Listeners(g.Name))
		}
	}
	add(m.Proxyless)
	return out
}

func (e *env) run(t *Test) *Result {
	res := &Result{Test: t}
	if t.intentionOnly() {
		res.Got = e.checkIntention(t, res)
		return res
	}
	rc, fail := e.routeConfig(t)
	if fail != nil {
		res.Got = "not evaluated"
		res.Failures = []Failure{*fail}
		return res
	}
	res.RouteConfig = rc.GetName()
	m := routematch.Match(rc, t.Request)
	res.VirtualHost = m.VirtualHost.GetName()
	if m.Route != nil {
		res.Route = cmp.Or(e.sources[rc.GetName()+"\x00"+m.Route.GetName()], m.Route.GetName())
	}
	c := &check{t: t, res: res, m: m, e: e}
	res.Got = c.got()
	c.evaluate()
	if t.Expect.Intention != nil {
		res.Got += "; " + e.checkIntention(t, res)
	}
	slices.SortStableFunc(res.Failures, func(a, b Failure) int {
		return cmp.Or(cmp.Compare(a.Subject.Start.Line, b.Subject.Start.Line), cmp.Compare(a.Subject.Start.Column, b.Subject.Start.Column))
	})
	return res
}

// routeConfig finds the RDS resource of the test's proxy group and
// listener, or explains why there is none.
func (e *env) routeConfig(t *Test) (*routev3.RouteConfiguration, *Failure) {
	failAt := func(attr, format string, args ...any) *Failure {
		return &Failure{Subject: t.ranges[attr], Message: attr + ": " + fmt.Sprintf(format, args...)}
	}
	p := e.pol.ProxyFor(t.Proxy)
	if p == nil {
		return nil, failAt("proxy", "no proxy group matches %q", t.Proxy)
	}
	if p.Proxyless {
		return nil, failAt("proxy", "proxy group %q is proxyless; route tests evaluate Envoy listeners", p.Name)
	}
	group := e.out.Groups[p.Name]
	if group == nil {
		return nil, failAt("proxy", "proxy group %q has no translation", p.Name)
	}
	listener := t.Listener
	if listener == "" {
		var http []string
		for _, l := range p.Listeners {
			if l.Protocol != "tcp" {
				http = append(http, l.Name)
			}
		}
		if len(http) != 1 {
			return nil, failAt("proxy", "proxy group %q has %d HTTP listeners (%s); name one with listener = \"NAME\"", p.Name, len(http), strings.Join(quoteAll(http), ", "))
		}
		listener = http[0]
	}
	name := p.Name + "." + listener
	for _, rc := range group.Routes {
		if rc.GetName() == name {
			return rc, nil
		}
	}
	for _, l := range p.Listeners {
		if l.Name == listener {
			return nil, failAt("listener", "listener %q of proxy group %q is a TCP listener; it has no routes", listener, p.Name)
		}
	}
	return nil, failAt("listener", "proxy group %q has no listener %q", p.Name, listener)
}

type check struct {
	t   *Test
	res *Result
	m   routematch.Result
	e   *env
}

func (c *check) fail(attr, format string, args ...any) {
	msg := attr + ": " + fmt.Sprintf(format, args...)
	c.res.Failures = append(c.res.Failures, Failure{Subject: c.t.ranges[attr], Message: msg})
}

// got describes the outcome of the match.
func (c *check) got() string {
	switch {
	case c.m.VirtualHost == nil:
		return fmt.Sprintf("no virtual host for host %q (404)", c.t.Request.Host)
	case c.m.Route == nil:
		return "no route (404)"
	case c.cors().preflight:
		return "a CORS preflight Envoy answers (200)"
	}
	switch a := c.m.Route.GetAction().(type) {
	case *routev3.Route_Route:
		if cl := a.Route.GetCluster(); cl != "" {
			return fmt.Sprintf("cluster %q", cl)
		}
		return "split " + formatSplit(splitOf(a.Route))
	case *routev3.Route_Redirect:
		return fmt.Sprintf("redirect %d to %q", redirectStatus(a.Redirect), c.location(a.Redirect))
	case *routev3.Route_DirectResponse:
		return fmt.Sprintf("direct response %d", a.DirectResponse.GetStatus())
	}
	return "an unsupported route action"
}

func (c *check) routeAction() *routev3.RouteAction {
	if a, ok := c.m.Route.GetAction().(*routev3.Route_Route); ok {
		return a.Route
	}
	return nil
}

func (c *check) evaluate() {
	x := &c.t.Expect
	got := c.res.Got
	if x.NoRoute != nil {
		switch {
		case *x.NoRoute && c.m.Route != nil:
			c.fail("no_route", "expected no route (404), got %s", got)
		case !*x.NoRoute && c.m.Route == nil:
			c.fail("no_route", "expected a route, got %s", got)
		}
	}
	if x.VirtualHost != nil && c.res.VirtualHost != *x.VirtualHost {
		vh := strconv.Quote(c.res.VirtualHost)
		if c.m.VirtualHost == nil {
			vh = fmt.Sprintf("none (no domain matches %q)", c.t.Request.Host)
		}
		c.fail("virtual_host", "expected %q, got %s", *x.VirtualHost, vh)
	}
	ra := c.routeAction()
	if x.Cluster != nil && (ra == nil || ra.GetCluster() != *x.Cluster) {
		c.fail("service", "expected cluster %q, got %s", *x.Cluster, got)
	}
	if x.Split != nil {
		ok := false
		if ra != nil {
			if cl := ra.GetCluster(); cl != "" {
				// A one-cluster split is served as a plain cluster route.
				ok = len(x.Split) == 1 && x.Split[cl] > 0
			} else {
				ok = maps.Equal(splitOf(ra), x.Split)
			}
		}
		if !ok {
			c.fail("split", "expected %s, got %s", formatSplit(x.Split), got)
		}
	}
	if x.Status != nil {
		status, ok := c.status()
		switch {
		case !ok:
			c.fail("status", "expected %d, got %s (the upstream answers)", *x.Status, got)
		case status != *x.Status:
			c.fail("status", "expected %d, got %s", *x.Status, got)
		}
	}
	if x.Location != nil {
		if r, ok := c.m.Route.GetAction().(*routev3.Route_Redirect); !ok {
			c.fail("location", "expected a redirect to %q, got %s", *x.Location, got)
		} else if loc := c.location(r.Redirect); loc != *x.Location {
			c.fail("location", "expected %q, got %q", *x.Location, loc)
		}
	}
	if x.Body != nil {
		if d, ok := c.m.Route.GetAction().(*routev3.Route_DirectResponse); !ok {
			c.fail("body", "expected a direct response with body %q, got %s", *x.Body, got)
		} else if b := d.DirectResponse.GetBody().GetInlineString(); b != *x.Body {
			c.fail("body", "expected %q, got %q", *x.Body, b)
		}
	}
	if x.RewritePath != nil {
		if ra == nil {
			c.fail("rewrite_path", "expected %q, got %s", *x.RewritePath, got)
		} else if p := rewritePath(c.m.Route.GetMatch(), ra.GetPrefixRewrite(), ra.GetRegexRewrite().GetPattern().GetRegex(), ra.GetRegexRewrite().GetSubstitution(), ra.GetRegexRewrite() != nil, c.t.Request.Path); p != *x.RewritePath {
			c.fail("rewrite_path", "expected %q, got %q", *x.RewritePath, p)
		}
	}
	if x.RewriteHost != nil {
		if ra == nil {
			c.fail("rewrite_host", "expected %q, got %s", *x.RewriteHost, got)
		} else if h := cmp.Or(ra.GetHostRewriteLiteral(), stripPort(c.t.Request.Host)); h != *x.RewriteHost {
			c.fail("rewrite_host", "expected %q, got %q", *x.RewriteHost, h)
		}
	}
	if x.Timeout != nil {
		switch {
		case ra == nil:
			c.fail("timeout", "expected %s, got %s", *x.Timeout, got)
		case ra.GetTimeout() == nil && *x.Timeout != EnvoyDefaultTimeout:
			c.fail("timeout", "expected %s, got %s (Envoy's default: the route sets none)", *x.Timeout, EnvoyDefaultTimeout)
		case ra.GetTimeout() != nil && ra.GetTimeout().AsDuration() != *x.Timeout:
			c.fail("timeout", "expected %s, got %s", *x.Timeout, ra.GetTimeout().AsDuration())
		}
	}
	if x.Retries != nil {
		rp := ra.GetRetryPolicy()
		n := 0
		if rp != nil {
			n = 1 // Envoy's default num_retries
			if rp.GetNumRetries() != nil {
				n = int(rp.GetNumRetries().GetValue())
			}
		}
		switch {
		case ra == nil:
			c.fail("retries", "expected %d, got %s", *x.Retries, got)
		case n != *x.Retries && rp == nil:
			c.fail("retries", "expected %d, got 0 (the route has no retry policy)", *x.Retries)
		case n != *x.Retries:
			c.fail("retries", "expected %d, got %d", *x.Retries, n)
		}
	}
	if x.RetryOn != nil {
		var on []string
		if s := ra.GetRetryPolicy().GetRetryOn(); s != "" {
			on = strings.Split(s, ",")
		}
		switch {
		case ra == nil:
			c.fail("retry_on", "expected %s, got %s", formatList(x.RetryOn), got)
		case !sameSet(on, x.RetryOn):
			c.fail("retry_on", "expected %s, got %s", formatList(x.RetryOn), formatList(on))
		}
	}
	c.evaluateHTTP()
	c.endpoints("endpoints", x.Endpoints, func(*endpointv3.LbEndpoint) bool { return true })
	c.endpoints("healthy_endpoints", x.HealthyEndpoints, func(lb *endpointv3.LbEndpoint) bool {
		// Envoy routes to UNKNOWN endpoints as to HEALTHY ones.
		s := lb.GetHealthStatus()
		return s == corev3.HealthStatus_HEALTHY || s == corev3.HealthStatus_UNKNOWN
	})
}

// endpoints checks a count of the routed cluster's endpoints.
func (c *check) endpoints(attr string, want *int, count func(*endpointv3.LbEndpoint) bool) {
	if want == nil {
		return
	}
	cl := c.routeAction().GetCluster()
	if cl == "" {
		c.fail(attr, "expected %d, got %s; %s counts the endpoints of a route to one cluster", *want, c.res.Got, attr)
		return
	}
	n := 0
	for _, loc := range c.e.eds[cl].GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			if count(lb) {
				n++
			}
		}
	}
	if n != *want {
		c.fail(attr, "expected %d, got %d in cluster %q", *want, n, cl)
	}
}

// status is what Envoy answers itself; false when the upstream answers.
func (c *check) status() (int, bool) {
	if c.m.Route == nil {
		return 404, true
	}
	if status, ok := c.filterStatus(); ok {
		return status, true
	}
	switch a := c.m.Route.GetAction().(type) {
	case *routev3.Route_Redirect:
		return redirectStatus(a.Redirect), true
	case *routev3.Route_DirectResponse:
		return int(a.DirectResponse.GetStatus()), true
	}
	return 0, false
}

var redirectCodes = map[routev3.RedirectAction_RedirectResponseCode]int{
	routev3.RedirectAction_MOVED_PERMANENTLY:  301,
	routev3.RedirectAction_FOUND:              302,
	routev3.RedirectAction_SEE_OTHER:          303,
	routev3.RedirectAction_TEMPORARY_REDIRECT: 307,
	routev3.RedirectAction_PERMANENT_REDIRECT: 308,
}

func redirectStatus(ra *routev3.RedirectAction) int {
	return redirectCodes[ra.GetResponseCode()]
}

// location is the Location header Envoy sends for a redirect, following
// Envoy's Http::Utility::newUri: the scheme, host and port from the
// redirect or else the request's (x-forwarded-proto first), the path
// rewritten by the redirect (path_redirect keeps the request's query unless
// it has one of its own; prefix and regex rewrites act on the matched
// path), and strip_query applied last. The request's port is gone by then:
// the translator's connection managers strip it before routing.
func (c *check) location(ra *routev3.RedirectAction) string {
	req := c.t.Request
	scheme := c.t.Scheme
	if p, ok := req.Headers["x-forwarded-proto"]; ok {
		scheme = p
	}
	switch {
	case ra.GetSchemeRedirect() != "":
		scheme = ra.GetSchemeRedirect()
	case ra.GetHttpsRedirect():
		scheme = "https"
	}
	host := cmp.Or(ra.GetHostRedirect(), stripPort(req.Host))
	port := ""
	if ra.GetPortRedirect() != 0 {
		port = fmt.Sprintf(":%d", ra.GetPortRedirect())
	}
	path := rewritePath(c.m.Route.GetMatch(), ra.GetPrefixRewrite(), ra.GetRegexRewrite().GetPattern().GetRegex(), ra.GetRegexRewrite().GetSubstitution(), ra.GetRegexRewrite() != nil, req.Path)
	pathHasQuery := false
	if pr := ra.GetPathRedirect(); pr != "" {
		pathHasQuery = strings.Contains(pr, "?")
		if _, q, ok := strings.Cut(path, "?"); ok && !pathHasQuery {
			path = pr + "?" + q
		} else {
			path = pr
		}
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	if ra.GetStripQuery() && !pathHasQuery {
		path, _, _ = strings.Cut(path, "?")
	}
	return scheme + "://" + host + port + path
}

// rewritePath applies a prefix_rewrite (replacing the part of the path
// the route matched: the prefix, or the whole path for path and regex
// matches) or a regex_rewrite (RE2 GlobalReplace on the path without the
// query) the way Envoy does; the query string is kept.
func rewritePath(m *routev3.RouteMatch, prefixRewrite, regex, substitution string, hasRegex bool, reqPath string) string {
	path, query, hasQuery := strings.Cut(reqPath, "?")
	switch {
	case prefixRewrite != "":
		matched := len(path)
		if p, ok := m.GetPathSpecifier().(*routev3.RouteMatch_Prefix); ok && len(p.Prefix) <= len(path) {
			matched = len(p.Prefix)
		}
		path = prefixRewrite + path[matched:]
	case hasRegex:
		if re, err := regexp.Compile(regex); err == nil {
			path = re.ReplaceAllString(path, goSubstitution(substitution))
		}
	}
	if hasQuery {
		return path + "?" + query
	}
	return path
}

// goSubstitution turns an RE2 substitution (\1, \\) into Go's ($1, $).
func goSubstitution(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch == '$':
			b.WriteString("$$")
		case ch == '\\' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			b.WriteString("${" + string(s[i+1]) + "}")
			i++
		case ch == '\\' && i+1 < len(s) && s[i+1] == '\\':
			b.WriteByte('\\')
			i++
		default:
			b.WriteByte(ch)
		}
	}
	return b.String()
}

func stripPort(host string) string {
	if strings.HasPrefix(host, "[") {
		if i := strings.LastIndex(host, "]"); i >= 0 {
			return host[:i+1]
		}
		return host
	}
	h, _, _ := strings.Cut(host, ":")
	return h
}

func splitOf(ra *routev3.RouteAction) map[string]int {
	out := map[string]int{}
	for _, w := range ra.GetWeightedClusters().GetClusters() {
		out[w.GetName()] += int(w.GetWeight().GetValue())
	}
	return out
}

// formatSplit writes a split as the HCL map a test states it with.
func formatSplit(s map[string]int) string {
	parts := make([]string, 0, len(s))
	for _, k := range slices.Sorted(maps.Keys(s)) {
		parts = append(parts, fmt.Sprintf("%q = %d", k, s[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func formatList(l []string) string {
	return "[" + strings.Join(quoteAll(l), ", ") + "]"
}

func quoteAll(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = strconv.Quote(s)
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
