package routematch_test

import (
	"encoding/json"
	"os"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/consul-xds-bridge/consul-xds-bridge/routetest/routematch"
)

// routesGolden is the route table the tests match against: what the real
// pipeline makes of ../../model/testdata/routematch/policy.hcl (model.Build,
// then xds.Translate), as xds's golden test records it. So the table
// checks the matcher and the translation together, and a change of
// either shows here once the goldens are rewritten.
const routesGolden = "../../xds/testdata/routematch/rds.golden.json"

// routeConfig reads the edge.http route configuration from routesGolden.
func routeConfig(t *testing.T) *routev3.RouteConfiguration {
	t.Helper()
	data, err := os.ReadFile(routesGolden)
	if err != nil {
		t.Fatal(err)
	}
	var list []json.RawMessage
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatalf("%s: %v", routesGolden, err)
	}
	for _, raw := range list {
		rc := &routev3.RouteConfiguration{}
		if err := protojson.Unmarshal(raw, rc); err != nil {
			t.Fatalf("%s: %v", routesGolden, err)
		}
		if rc.GetName() == "edge.http" {
			return rc
		}
	}
	t.Fatalf("%s has no route configuration edge.http", routesGolden)
	return nil
}

// target describes where a result went: a cluster, "weighted", "redirect",
// "direct:<status>" or "404".
func target(r routematch.Result) string {
	if r.Route == nil {
		return "404"
	}
	switch a := r.Route.GetAction().(type) {
	case *routev3.Route_Route:
		if c := a.Route.GetCluster(); c != "" {
			return c
		}
		return "weighted"
	case *routev3.Route_Redirect:
		return "redirect"
	case *routev3.Route_DirectResponse:
		return "direct"
	}
	return "?"
}

func TestMatch(t *testing.T) {
	rc := routeConfig(t)
	tests := map[string]struct {
		req      routematch.Request
		wantVH   string
		wantDest string
	}{
		// Virtual host selection.
		"exact domain":                     {routematch.Request{Host: "shop.example.com", Path: "/"}, "exact", "web"},
		"exact domain is case-insensitive": {routematch.Request{Host: "SHOP.Example.COM", Path: "/"}, "exact", "web"},
		"port is stripped":                 {routematch.Request{Host: "shop.example.com:8443", Path: "/"}, "exact", "web"},
		"port stripped before wildcards":   {routematch.Request{Host: "www.example.com:80", Path: "/"}, "suffix", "suffix"},
		"suffix wildcard":                  {routematch.Request{Host: "www.example.com", Path: "/"}, "suffix", "suffix"},
		"longest suffix wins":              {routematch.Request{Host: "a.eu.example.com", Path: "/"}, "longer-suffix", "eu"},
		"suffix needs a non-empty label":   {routematch.Request{Host: ".example.com", Path: "/"}, "default", "redirect"},
		"bare domain is not *.domain":      {routematch.Request{Host: "example.com", Path: "/"}, "default", "redirect"},
		"suffix beats prefix wildcard":     {routematch.Request{Host: "shop.example.com.evil", Path: "/"}, "prefix", "prefix"},
		"prefix wildcard":                  {routematch.Request{Host: "shop.internal", Path: "/"}, "prefix", "prefix"},
		"catch-all domain":                 {routematch.Request{Host: "other.org", Path: "/"}, "default", "redirect"},
		"no host header uses catch-all":    {routematch.Request{Path: "/"}, "default", "redirect"},

		// Path matching.
		"exact path":                       {routematch.Request{Host: "shop.example.com", Path: "/healthz"}, "exact", "direct"},
		"exact path ignores query":         {routematch.Request{Host: "shop.example.com", Path: "/healthz?full=1"}, "exact", "direct"},
		"exact path is not a prefix":       {routematch.Request{Host: "shop.example.com", Path: "/healthz/x"}, "exact", "web"},
		"prefix needs trailing slash here": {routematch.Request{Host: "shop.example.com", Path: "/api", Method: "GET"}, "exact", "web"},
		"prefix match":                     {routematch.Request{Host: "shop.example.com", Path: "/api/users", Method: "GET"}, "exact", "api"},
		"prefix is case-sensitive":         {routematch.Request{Host: "shop.example.com", Path: "/Api/users", Method: "GET"}, "exact", "web"},
		"upper-case prefix matches":        {routematch.Request{Host: "shop.example.com", Path: "/API/users"}, "exact", "api-upper"},
		"case-insensitive prefix":          {routematch.Request{Host: "shop.example.com", Path: "/DOCS/intro"}, "exact", "docs"},
		"case-insensitive prefix lower":    {routematch.Request{Host: "shop.example.com", Path: "/docs/intro"}, "exact", "docs"},
		"regex is anchored (full match)":   {routematch.Request{Host: "shop.example.com", Path: "/items/42"}, "exact", "items"},
		"regex does not match a prefix":    {routematch.Request{Host: "shop.example.com", Path: "/items/42/reviews"}, "exact", "web"},
		"regex does not match mid-path":    {routematch.Request{Host: "shop.example.com", Path: "/v1/items/42"}, "exact", "web"},
		"regex ignores the query":          {routematch.Request{Host: "shop.example.com", Path: "/items/7?x=1"}, "exact", "items"},

		// Headers, method, first match.
		"header exact wins by order":       {routematch.Request{Host: "shop.example.com", Path: "/api/x", Method: "GET", Headers: map[string]string{"x-canary": "1"}}, "exact", "api.v2"},
		"header exact mismatch":            {routematch.Request{Host: "shop.example.com", Path: "/api/x", Method: "GET", Headers: map[string]string{"x-canary": "10"}}, "exact", "api"},
		"header value is case-sensitive":   {routematch.Request{Host: "shop.example.com", Path: "/api/x", Method: "GET", Headers: map[string]string{"x-canary": "1 "}}, "exact", "api"},
		"canary works for any method":      {routematch.Request{Host: "shop.example.com", Path: "/api/x", Method: "POST", Headers: map[string]string{"x-canary": "1"}}, "exact", "api.v2"},
		"method mismatch falls through":    {routematch.Request{Host: "shop.example.com", Path: "/api/x", Method: "POST"}, "exact", "web"},
		"method compares upper-case":       {routematch.Request{Host: "shop.example.com", Path: "/api/x", Method: "get"}, "exact", "api"},
		"inverted present: header present": {routematch.Request{Host: "shop.example.com", Path: "/api/x", Method: "GET", Headers: map[string]string{"x-debug": ""}}, "exact", "web"},
		"inverted present: header absent":  {routematch.Request{Host: "shop.example.com", Path: "/api/x", Method: "GET"}, "exact", "api"},
		"header regex full match":          {routematch.Request{Host: "shop.example.com", Path: "/ua", Headers: map[string]string{"user-agent": "curl/8.5"}}, "exact", "curl"},
		"header regex is anchored":         {routematch.Request{Host: "shop.example.com", Path: "/ua", Headers: map[string]string{"user-agent": "x curl/8.5"}}, "exact", "web"},
		"missing header does not match":    {routematch.Request{Host: "shop.example.com", Path: "/ua"}, "exact", "web"},

		// Query parameters.
		"query prefix":                  {routematch.Request{Host: "shop.example.com", Path: "/search?q=golang"}, "exact", "search-go"},
		"query prefix mismatch":         {routematch.Request{Host: "shop.example.com", Path: "/search?q=rust"}, "exact", "web"},
		"query present":                 {routematch.Request{Host: "shop.example.com", Path: "/search?debug"}, "exact", "search-debug"},
		"first of repeated query value": {routematch.Request{Host: "shop.example.com", Path: "/search?q=rust&q=go"}, "exact", "web"},
		"query order of routes":         {routematch.Request{Host: "shop.example.com", Path: "/search?debug=1&q=go"}, "exact", "search-go"},
		"query on path without it":      {routematch.Request{Host: "shop.example.com", Path: "/searching?q=go"}, "exact", "search-go"},
	}
	if len(tests) < 40 {
		t.Fatalf("only %d cases", len(tests))
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res := routematch.Match(rc, tc.req)
			if got := res.VirtualHost.GetName(); got != tc.wantVH {
				t.Errorf("virtual host = %q, want %q", got, tc.wantVH)
			}
			if got := target(res); got != tc.wantDest {
				t.Errorf("destination = %q, want %q (route %s)", got, tc.wantDest, res.Route.GetName())
			}
		})
	}
}
