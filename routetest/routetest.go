// Package routetest runs the route tests operators write next to their
// policy: `route_test "NAME" { ... }` blocks that send a request to a proxy
// group's listener and state where it must go. Each request is evaluated
// (with package routematch, Envoy's route selection) against the
// RouteConfiguration the translator generates from the policy, so a test
// checks what Envoy would do, not what the HCL seems to say. It backs
// `consul-xds-bridge test` and needs no Consul; a catalog fixture is only
// needed for expectations on endpoints.
package routetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/routetest/routematch"
)

// The HCL schema of a route_test block's body.
type testSchema struct {
	Proxy    string         `hcl:"proxy"`
	Listener *string        `hcl:"listener,optional"`
	Request  *requestSchema `hcl:"request,block"`
	Expect   *expectSchema  `hcl:"expect,block"`
}

type requestSchema struct {
	Host     string            `hcl:"host"`
	Path     *string           `hcl:"path,optional"`
	Method   *string           `hcl:"method,optional"`
	Scheme   *string           `hcl:"scheme,optional"`
	Headers  map[string]string `hcl:"headers,optional"`
	Source   *string           `hcl:"source,optional"`
	Body     hcl.Body          `hcl:",body"`
	DefRange hcl.Range         `hcl:",def_range"`
}

type expectSchema struct {
	NoRoute          *bool          `hcl:"no_route,optional"`
	VirtualHost      *string        `hcl:"virtual_host,optional"`
	Service          *string        `hcl:"service,optional"`
	Subset           *string        `hcl:"subset,optional"`
	Split            map[string]int `hcl:"split,optional"`
	Status           *int           `hcl:"status,optional"`
	Location         *string        `hcl:"location,optional"`
	Body             *string        `hcl:"body,optional"`
	RewritePath      *string        `hcl:"rewrite_path,optional"`
	RewriteHost      *string        `hcl:"rewrite_host,optional"`
	Timeout          *string        `hcl:"timeout,optional"`
	Retries          *int           `hcl:"retries,optional"`
	RetryOn          []string       `hcl:"retry_on,optional"`
	Endpoints        *int           `hcl:"endpoints,optional"`
	HealthyEndpoints *int           `hcl:"healthy_endpoints,optional"`
	// Expectations on HTTP filters (http.go).
	CORSPreflight *bool             `hcl:"cors_preflight,optional"`
	CORSHeaders   map[string]string `hcl:"cors_headers,optional"`
	RateLimit     *string           `hcl:"rate_limit,optional"`
	RateLimitDesc []string          `hcl:"rate_limit_descriptors,optional"`
	JWT           *string           `hcl:"jwt,optional"`
	Intention     *string           `hcl:"intention,optional"`
	Remain        hcl.Body          `hcl:",body"`
	DefRange      hcl.Range         `hcl:",def_range"`
}

// Test is one decoded route_test block.
type Test struct {
	Name string
	// Range is the block's header, `route_test "NAME"`.
	Range hcl.Range
	// Proxy is a proxy group name or a node.cluster (resolved like an
	// Envoy's: exact name first, then glob patterns).
	Proxy string
	// Listener is the listener's name in the group; "" when the group has
	// a single HTTP listener.
	Listener string
	Request  routematch.Request
	// Scheme is the request's scheme ("http" or "https"), for the
	// Location of redirects that keep it.
	Scheme string
	// Source is the calling mesh service, for intention expectations.
	Source string
	Expect Expect

	// ranges of the test's and its expect block's attributes, by name,
	// where failures point.
	ranges map[string]hcl.Range
}

// Expect is what a test asserts; nil and empty fields assert nothing.
type Expect struct {
	// NoRoute: true, the request matches no route (Envoy answers 404);
	// false, it matches one.
	NoRoute *bool
	// VirtualHost is the name of the virtual host the request selects.
	VirtualHost *string
	// Cluster is the single cluster routed to ("S" or "S.X", from service
	// and subset).
	Cluster *string
	// Split is a weighted route's clusters and weights.
	Split map[string]int
	// Status is the redirect's or direct response's status, or 404 for
	// no route.
	Status *int
	// Location is a redirect's Location header.
	Location *string
	// Body is a direct response's body.
	Body *string
	// RewritePath is the path (with the query) the upstream receives.
	RewritePath *string
	// RewriteHost is the Host the upstream receives.
	RewriteHost *string
	// Timeout is the route's effective timeout (Envoy's default 15s when
	// the route sets none; 0 for none).
	Timeout *time.Duration
	// Retries is the retry policy's number of retries (0 without one).
	Retries *int
	// RetryOn is the retry policy's conditions, in any order.
	RetryOn []string
	// Endpoints and HealthyEndpoints count the endpoints of the single
	// cluster routed to, in every priority; they need a catalog.
	Endpoints        *int
	HealthyEndpoints *int
	// HTTP holds the expectations on HTTP filters (http.go).
	HTTP httpExpect
	// Intention is what the sidecar's intentions do with the request
	// from Source (intention.go).
	Intention *ir.IntentionAction
}

// needsCatalog reports whether the test counts endpoints.
func (t *Test) needsCatalog() (hcl.Range, bool) {
	switch {
	case t.Expect.Endpoints != nil:
		return t.ranges["endpoints"], true
	case t.Expect.HealthyEndpoints != nil:
		return t.ranges["healthy_endpoints"], true
	}
	return hcl.Range{}, false
}

// Suite is the policy and route tests of a set of files.
type Suite struct {
	Config *policy.Config
	Tests  []*Test
	// Sources holds each file's content, by path.
	Sources map[string][]byte
}

// Load reads files the way -config files are read and merged
// (policy.LoadFiles: policy and daemon settings, and whatever the policy
// names on disk) and collects the route_test blocks of all of them, in
// file order. Route tests may sit in the policy's files or in files of
// their own.
func Load(paths ...string) (*Suite, hcl.Diagnostics) {
	if len(paths) == 0 {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "No files",
			Detail:   "Name the policy files and the files holding route_test blocks.",
		}}
	}
	cfg, sources, diags := policy.LoadFiles(paths...)
	if diags.HasErrors() {
		return nil, diags
	}
	docs := make([]*policy.Document, 0, len(paths))
	for _, p := range paths {
		// Parsed once more for the route_test blocks, which Config
		// does not carry; LoadFiles has already reported any problem.
		if d, ds := policy.Parse(p, sources[p]); !ds.HasErrors() {
			docs = append(docs, d)
		}
	}
	tests, ds := Decode(docs...)
	diags = append(diags, ds...)
	if diags.HasErrors() {
		return nil, diags
	}
	return &Suite{Config: cfg, Tests: tests, Sources: sources}, diags
}

// Decode decodes and checks the route_test blocks of documents. Two tests
// of the same name are an error naming both.
func Decode(docs ...*policy.Document) ([]*Test, hcl.Diagnostics) {
	var (
		diags hcl.Diagnostics
		tests []*Test
		seen  = map[string]hcl.Range{}
	)
	for _, d := range docs {
		for _, b := range d.RouteTests() {
			if prev, ok := seen[b.Name]; ok {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Duplicate route_test",
					Detail:   fmt.Sprintf("A route_test named %q is already defined at %s; give each test its own name.", b.Name, pos(prev)),
					Subject:  b.DefRange.Ptr(),
				})
				continue
			}
			seen[b.Name] = b.DefRange
			t, ds := decodeTest(b)
			diags = append(diags, ds...)
			if t != nil {
				tests = append(tests, t)
			}
		}
	}
	return tests, diags
}

func decodeTest(b policy.RouteTestBlock) (*Test, hcl.Diagnostics) {
	var raw testSchema
	diags := gohcl.DecodeBody(b.Body, nil, &raw)
	if diags.HasErrors() {
		return nil, diags
	}
	t := &Test{Name: b.Name, Range: b.DefRange, Proxy: raw.Proxy, Scheme: "http", ranges: map[string]hcl.Range{}}
	for _, name := range []string{"proxy", "listener"} {
		t.ranges[name] = attrRange(b.Body, name, b.DefRange)
	}
	errorAt := func(rng hcl.Range, summary, detail string) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: rng.Ptr()})
	}
	if strings.TrimSpace(b.Name) == "" {
		errorAt(b.DefRange, "Empty route_test name", "Name each test: route_test \"canary header goes to v2\" { ... }.")
	}
	if raw.Proxy == "" {
		errorAt(t.ranges["proxy"], "Empty proxy", "Name the proxy group (or a node.cluster of it) whose listener the request reaches.")
	}
	if raw.Listener != nil {
		if *raw.Listener == "" {
			errorAt(t.ranges["listener"], "Empty listener", "Name a listener of the proxy group, or leave listener out when the group has one HTTP listener.")
		}
		t.Listener = *raw.Listener
	}
	if raw.Request == nil {
		errorAt(b.DefRange, "Missing request block", "A route_test needs a request block: request { host = \"shop.example.com\" ... }.")
	} else {
		diags = append(diags, decodeRequest(t, raw.Request)...)
	}
	if raw.Expect == nil {
		errorAt(b.DefRange, "Missing expect block", "A route_test needs an expect block stating where the request must go, e.g. expect { service = \"api\" }.")
	} else {
		diags = append(diags, decodeExpect(t, raw.Expect)...)
	}
	if diags.HasErrors() {
		return nil, diags
	}
	return t, diags
}

func decodeRequest(t *Test, r *requestSchema) hcl.Diagnostics {
	var diags hcl.Diagnostics
	errorAt := func(name, summary, detail string) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: attrRange(r.Body, name, r.DefRange).Ptr()})
	}
	t.Request = routematch.Request{Host: r.Host, Path: "/", Method: "GET"}
	if r.Host == "" {
		errorAt("host", "Empty host", "Set the request's Host header (a port is allowed, as in \"shop.example.com:8080\").")
	}
	if r.Path != nil {
		t.Request.Path = *r.Path
		if !strings.HasPrefix(*r.Path, "/") {
			errorAt("path", "Invalid path", fmt.Sprintf("The request path %q must start with \"/\" (a query string may follow: \"/search?q=go\").", *r.Path))
		}
	}
	if r.Method != nil {
		t.Request.Method = strings.ToUpper(*r.Method)
		if *r.Method == "" || strings.ContainsAny(*r.Method, " \t") {
			errorAt("method", "Invalid method", fmt.Sprintf("%q is not an HTTP method.", *r.Method))
		}
	}
	if r.Scheme != nil {
		t.Scheme = *r.Scheme
		if *r.Scheme != "http" && *r.Scheme != "https" {
			errorAt("scheme", "Invalid scheme", fmt.Sprintf("The scheme is \"http\" or \"https\", not %q.", *r.Scheme))
		}
	}
	if r.Source != nil {
		t.Source = *r.Source
		if *r.Source == "" || strings.Contains(*r.Source, "*") {
			errorAt("source", "Invalid source", fmt.Sprintf("The source is the calling service's name, like \"web\"; got %q.", *r.Source))
		}
	}
	if len(r.Headers) > 0 {
		t.Request.Headers = make(map[string]string, len(r.Headers))
		for _, k := range slices.Sorted(maps.Keys(r.Headers)) {
			v, name := r.Headers[k], strings.ToLower(k)
			switch {
			case name == "":
				errorAt("headers", "Invalid header name", "A header name is empty.")
			case name == "host" || strings.HasPrefix(name, ":"):
				errorAt("headers", "Invalid header name", fmt.Sprintf("Set %q with the request's host, path and method attributes, not in headers.", k))
			}
			t.Request.Headers[name] = v
		}
	}
	return diags
}

// actionExpectations assert on a matched route; no_route = true rules
// them out.
var actionExpectations = []string{"service", "subset", "split", "location", "body", "rewrite_path", "rewrite_host", "timeout", "retries", "retry_on", "endpoints", "healthy_endpoints"}

func decodeExpect(t *Test, e *expectSchema) hcl.Diagnostics {
	var diags hcl.Diagnostics
	attrs, _ := e.Remain.JustAttributes()
	for name, a := range attrs {
		t.ranges[name] = a.Range
	}
	errorAt := func(name, summary, detail string) {
		rng, ok := t.ranges[name]
		if !ok {
			rng = e.DefRange
		}
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: rng.Ptr()})
	}
	if len(attrs) == 0 {
		errorAt("", "Empty expect block", "State at least one expectation, e.g. service = \"api\", split = { ... }, status = 301 or no_route = true.")
	}
	x := &t.Expect
	x.NoRoute, x.VirtualHost, x.Location, x.Body, x.RewritePath, x.RewriteHost = e.NoRoute, e.VirtualHost, e.Location, e.Body, e.RewritePath, e.RewriteHost
	if e.Service != nil {
		c := *e.Service
		if c == "" {
			errorAt("service", "Empty service", "Name the service (the cluster) the request must reach.")
		}
		if e.Subset != nil {
			c += "." + *e.Subset
			if *e.Subset == "" {
				errorAt("subset", "Empty subset", "Name the subset, or leave subset out.")
			}
		}
		x.Cluster = &c
	} else if e.Subset != nil {
		errorAt("subset", "Subset without service", "A subset belongs to a service: set service too.")
	}
	if e.Split != nil {
		if e.Service != nil {
			errorAt("split", "Both service and split", "Expect either one cluster (service, subset) or a weighted split, not both.")
		}
		if len(e.Split) == 0 {
			errorAt("split", "Empty split", "List the clusters and their weights: split = { \"api.v1\" = 90, \"api.v2\" = 10 }.")
		}
		for _, c := range slices.Sorted(maps.Keys(e.Split)) {
			if w := e.Split[c]; c == "" || w < 0 {
				errorAt("split", "Invalid split", fmt.Sprintf("Each split entry is a cluster name (\"S\" or \"S.X\") with a weight of 0 or more; got %q = %d.", c, w))
			}
		}
		x.Split = e.Split
	}
	if e.Status != nil {
		if *e.Status < 100 || *e.Status > 599 {
			errorAt("status", "Invalid status", fmt.Sprintf("%d is not an HTTP status.", *e.Status))
		}
		x.Status = e.Status
	}
	if e.Timeout != nil {
		d, err := time.ParseDuration(*e.Timeout)
		if err != nil || d < 0 {
			errorAt("timeout", "Invalid timeout", fmt.Sprintf("%q is not a duration like \"3s\" or \"500ms\" (\"0s\": no timeout).", *e.Timeout))
		}
		x.Timeout = &d
	}
	for _, n := range []struct {
		name string
		v    *int
		dst  **int
	}{{"retries", e.Retries, &x.Retries}, {"endpoints", e.Endpoints, &x.Endpoints}, {"healthy_endpoints", e.HealthyEndpoints, &x.HealthyEndpoints}} {
		if n.v != nil && *n.v < 0 {
			errorAt(n.name, "Invalid count", fmt.Sprintf("%s is a count, 0 or more; got %d.", n.name, *n.v))
		}
		*n.dst = n.v
	}
	if e.RetryOn != nil {
		x.RetryOn = e.RetryOn
	}
	diags = append(diags, decodeHTTPExpect(t, e, errorAt)...)
	diags = append(diags, decodeIntentionExpect(t, e, errorAt)...)
	if e.NoRoute != nil && *e.NoRoute {
		for _, name := range actionExpectations {
			if _, ok := attrs[name]; ok {
				errorAt(name, "Expectation contradicts no_route", fmt.Sprintf("With no_route = true the request matches no route, so %s cannot hold; remove one of them.", name))
			}
		}
		if e.Status != nil && *e.Status != 404 {
			errorAt("status", "Expectation contradicts no_route", "Envoy answers a request that matches no route with 404.")
		}
	}
	return diags
}

// attrRange is where attribute name is written in body, or fallback.
func attrRange(body hcl.Body, name string, fallback hcl.Range) hcl.Range {
	if sb, ok := body.(*hclsyntax.Body); ok {
		if a, ok := sb.Attributes[name]; ok {
			return a.SrcRange
		}
	}
	return fallback
}

func pos(r hcl.Range) string {
	return fmt.Sprintf("%s:%d:%d", r.Filename, r.Start.Line, r.Start.Column)
}
