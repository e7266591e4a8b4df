package routetest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/routetest"
)

// testPolicy is translated by the real translator; each route carries a
// marker comment so tests can name the location it is reported at.
const testPolicy = `
service "api" {
  subset "v1" {
    tags = ["v1"]
  }
  subset "v2" {
    tags = ["v2"]
  }
}

proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "shop" {
      domains = ["shop.example.com"]
      route { # canary
        match {
          path_prefix = "/api/"
          header "x-canary" {
            exact = "1"
          }
        }
        service = "api"
        subset  = "v2"
        timeout = "2s"
        retry {
          attempts = 2
          on       = ["5xx", "reset"]
        }
      }
      route { # split
        match {
          path_prefix = "/api/"
        }
        split {
          service = "api"
          subset  = "v1"
          weight  = 90
        }
        split {
          service = "api"
          subset  = "v2"
          weight  = 10
        }
      }
      route { # cart
        match {
          path_prefix = "/cart/"
        }
        service = "carts"
        rewrite {
          prefix = "/"
          host   = "carts.internal"
        }
      }
      route { # items
        match {
          path_regex = "/v[0-9]+/items/.*"
        }
        service = "items"
        rewrite {
          regex        = "^/v[0-9]+/(.*)$"
          substitution = "/\\1"
        }
      }
      route { # old
        match {
          path_prefix = "/old/"
        }
        redirect {
          scheme      = "https"
          port        = 8443
          prefix      = "/new/"
          strip_query = true
        }
      }
      route { # moved
        match {
          path = "/moved"
        }
        redirect {
          path   = "/here"
          status = 302
        }
      }
      route { # healthz
        match {
          path = "/healthz"
        }
        direct_response {
          status = 200
          body   = "ok\n"
        }
      }
      route { # slow
        match {
          path_prefix = "/slow/"
        }
        service = "web"
        timeout = "0s"
      }
      route { # web
        service = "web"
      }
    }
    virtual_host "legacy" {
      domains = ["*.legacy.example.com"]
      route { # legacy
        redirect {
          host   = "shop.example.com"
          status = 308
        }
      }
    }
  }
  listener "admin" {
    port = 9000
    virtual_host "admin" {
      route { # admin
        match {
          path_prefix = "/admin/"
        }
        service = "admin"
      }
    }
  }
  listener "db" {
    port     = 5432
    protocol = "tcp"
    service  = "postgres"
  }
}

proxy "sidecar-*" {
  listener "in" {
    port = 15000
    virtual_host "local" {
      route { # sidecar
        service = "web"
      }
    }
  }
}

proxy "grpc-*" {
  proxyless = true
}
`

const testCatalog = `{
  "services": {
    "api": [
      {"Node": {"Node": "n1", "Address": "10.0.0.1"}, "Service": {"ID": "api-1", "Port": 80, "Tags": ["v1"]},
       "Checks": [{"CheckID": "c", "Status": "passing"}]},
      {"Node": {"Node": "n2", "Address": "10.0.0.2"}, "Service": {"ID": "api-2", "Port": 80, "Tags": ["v1"]},
       "Checks": [{"CheckID": "c", "Status": "critical"}]},
      {"Node": {"Node": "n3", "Address": "10.0.0.3"}, "Service": {"ID": "api-3", "Port": 80, "Tags": ["v2"]},
       "Checks": [{"CheckID": "c", "Status": "passing"}]}
    ],
    "web": [
      {"Node": {"Node": "n1", "Address": "10.0.0.1"}, "Service": {"ID": "web-1", "Port": 80}, "Checks": [{"CheckID": "c", "Status": "passing"}]},
      {"Node": {"Node": "n2", "Address": "10.0.0.2"}, "Service": {"ID": "web-2", "Port": 80}, "Checks": [{"CheckID": "c", "Status": "warning"}]},
      {"Node": {"Node": "n3", "Address": "10.0.0.3"}, "Service": {"ID": "web-3", "Port": 80}, "Checks": [{"CheckID": "c", "Status": "critical"}]}
    ]
  }
}`

// routeAt is the location a route is reported at: its `route {` line.
func routeAt(t *testing.T, marker string) string {
	t.Helper()
	for i, line := range strings.Split(testPolicy, "\n") {
		if strings.HasSuffix(line, "route { # "+marker) {
			return fmt.Sprintf("policy.hcl:%d:%d", i+1, strings.Index(line, "route")+1)
		}
	}
	t.Fatalf("no route marked %q", marker)
	return ""
}

func parse(t *testing.T, name, src string) *policy.Document {
	t.Helper()
	doc, diags := policy.Parse(name, []byte(src))
	if diags.HasErrors() {
		t.Fatalf("%s: %s", name, diags)
	}
	return doc
}

func catalog(t *testing.T) *consul.Catalog {
	t.Helper()
	cat, err := consul.ReadFixture(strings.NewReader(testCatalog))
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// run decodes the route tests in src and runs them against testPolicy.
func run(t *testing.T, src string, cat *consul.Catalog) []*routetest.Result {
	t.Helper()
	pol := parse(t, "policy.hcl", testPolicy)
	tests := parse(t, "tests.hcl", src)
	cfg, diags := policy.Merge(pol, tests)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	decoded, diags := routetest.Decode(pol, tests)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	results, diags := routetest.Run(cfg.Policy, cat, decoded)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return results
}

func TestExpectations(t *testing.T) {
	tests := []struct {
		name      string
		request   string // request block body
		expect    string // expect block body
		listener  string
		proxy     string
		wantRoute string // route marker; "" for none
		wantGot   string
		wantFails []string
	}{
		{
			name:    "canary cluster, timeout, retries",
			request: `host = "shop.example.com"` + "\n" + `path = "/api/users"` + "\n" + `headers = { "X-Canary" = "1" }`,
			expect: `service = "api"` + "\n" + `subset = "v2"` + "\n" + `timeout = "2s"` + "\n" + `retries = 2` + "\n" + `retry_on = ["reset", "5xx"]` + "\n" +
				`virtual_host = "shop"` + "\n" + `no_route = false` + "\n" + `endpoints = 1` + "\n" + `healthy_endpoints = 1`,
			wantRoute: "canary", wantGot: `cluster "api.v2"`,
		},
		{
			name:      "canary expectations that do not hold",
			request:   `host = "shop.example.com"` + "\n" + `path = "/api/users"` + "\n" + `headers = { "x-canary" = "1" }`,
			expect:    `service = "api"` + "\n" + `subset = "v1"` + "\n" + `timeout = "3s"` + "\n" + `retries = 3` + "\n" + `retry_on = ["5xx"]` + "\n" + `virtual_host = "legacy"`,
			wantRoute: "canary", wantGot: `cluster "api.v2"`,
			wantFails: []string{
				`service: expected cluster "api.v1", got cluster "api.v2"`,
				`timeout: expected 3s, got 2s`,
				`retries: expected 3, got 2`,
				`retry_on: expected ["5xx"], got ["5xx", "reset"]`,
				`virtual_host: expected "legacy", got "shop"`,
			},
		},
		{
			name:      "split",
			request:   `host = "SHOP.example.com:8080"` + "\n" + `path = "/api/users?x=1"`,
			expect:    `split = { "api.v2" = 10, "api.v1" = 90 }` + "\n" + `timeout = "15s"` + "\n" + `retries = 0`,
			wantRoute: "split", wantGot: `split {"api.v1" = 90, "api.v2" = 10}`,
		},
		{
			name:      "split expectations that do not hold",
			request:   `host = "shop.example.com"` + "\n" + `path = "/api/users"`,
			expect:    `split = { "api.v1" = 80, "api.v2" = 20 }` + "\n" + `timeout = "3s"` + "\n" + `retries = 1` + "\n" + `endpoints = 2` + "\n" + `status = 200`,
			wantRoute: "split", wantGot: `split {"api.v1" = 90, "api.v2" = 10}`,
			wantFails: []string{
				`split: expected {"api.v1" = 80, "api.v2" = 20}, got split {"api.v1" = 90, "api.v2" = 10}`,
				`timeout: expected 3s, got 15s (Envoy's default: the route sets none)`,
				`retries: expected 1, got 0 (the route has no retry policy)`,
				`endpoints: expected 2, got split {"api.v1" = 90, "api.v2" = 10}; endpoints counts the endpoints of a route to one cluster`,
				`status: expected 200, got split {"api.v1" = 90, "api.v2" = 10} (the upstream answers)`,
			},
		},
		{
			name:      "service expected, split got",
			request:   `host = "shop.example.com"` + "\n" + `path = "/api/"`,
			expect:    `service = "api"`,
			wantRoute: "split", wantGot: `split {"api.v1" = 90, "api.v2" = 10}`,
			wantFails: []string{`service: expected cluster "api", got split {"api.v1" = 90, "api.v2" = 10}`},
		},
		{
			name:      "one-cluster split matches a cluster route",
			request:   `host = "shop.example.com"`,
			expect:    `split = { "web" = 100 }`,
			wantRoute: "web", wantGot: `cluster "web"`,
		},
		{
			name:      "prefix rewrite and host rewrite",
			request:   `host = "shop.example.com:8080"` + "\n" + `path = "/cart/items/7?currency=EUR"` + "\n" + `method = "post"`,
			expect:    `service = "carts"` + "\n" + `rewrite_path = "/items/7?currency=EUR"` + "\n" + `rewrite_host = "carts.internal"` + "\n" + `endpoints = 0`,
			wantRoute: "cart", wantGot: `cluster "carts"`,
		},
		{
			name:      "rewrite expectations that do not hold",
			request:   `host = "shop.example.com"` + "\n" + `path = "/cart/items/7"`,
			expect:    `rewrite_path = "/cart/items/7"` + "\n" + `rewrite_host = "shop.example.com"`,
			wantRoute: "cart", wantGot: `cluster "carts"`,
			wantFails: []string{
				`rewrite_path: expected "/cart/items/7", got "/items/7"`,
				`rewrite_host: expected "shop.example.com", got "carts.internal"`,
			},
		},
		{
			name:      "regex rewrite keeps the query",
			request:   `host = "shop.example.com"` + "\n" + `path = "/v2/items/9?a=b"`,
			expect:    `service = "items"` + "\n" + `rewrite_path = "/items/9?a=b"` + "\n" + `rewrite_host = "shop.example.com"`,
			wantRoute: "items", wantGot: `cluster "items"`,
		},
		{
			name:      "web without a rewrite keeps path and host",
			request:   `host = "shop.example.com:8080"` + "\n" + `path = "/docs/a?b"`,
			expect:    `rewrite_path = "/docs/a?b"` + "\n" + `rewrite_host = "shop.example.com"` + "\n" + `endpoints = 3` + "\n" + `healthy_endpoints = 2`,
			wantRoute: "web", wantGot: `cluster "web"`,
		},
		{
			name:      "endpoint counts that do not hold",
			request:   `host = "shop.example.com"`,
			expect:    `endpoints = 2` + "\n" + `healthy_endpoints = 3`,
			wantRoute: "web", wantGot: `cluster "web"`,
			wantFails: []string{
				`endpoints: expected 2, got 3 in cluster "web"`,
				`healthy_endpoints: expected 3, got 2 in cluster "web"`,
			},
		},
		{
			name:      "no timeout",
			request:   `host = "shop.example.com"` + "\n" + `path = "/slow/report"`,
			expect:    `timeout = "0s"`,
			wantRoute: "slow", wantGot: `cluster "web"`,
		},
		{
			name:      "prefix redirect with port, https and strip_query",
			request:   `host = "shop.example.com:8080"` + "\n" + `path = "/old/a/b?x=1"`,
			expect:    `status = 301` + "\n" + `location = "https://shop.example.com:8443/new/a/b"`,
			wantRoute: "old", wantGot: `redirect 301 to "https://shop.example.com:8443/new/a/b"`,
		},
		{
			name:      "path redirect keeps the query and the scheme",
			request:   `host = "shop.example.com"` + "\n" + `path = "/moved?x=1"` + "\n" + `scheme = "https"`,
			expect:    `status = 302` + "\n" + `location = "https://shop.example.com/here?x=1"`,
			wantRoute: "moved", wantGot: `redirect 302 to "https://shop.example.com/here?x=1"`,
		},
		{
			name:      "x-forwarded-proto sets the kept scheme",
			request:   `host = "shop.example.com"` + "\n" + `path = "/moved"` + "\n" + `headers = { "x-forwarded-proto" = "https" }`,
			expect:    `location = "https://shop.example.com/here"`,
			wantRoute: "moved", wantGot: `redirect 302 to "https://shop.example.com/here"`,
		},
		{
			name:      "host redirect by suffix wildcard",
			request:   `host = "www.legacy.example.com"` + "\n" + `path = "/p?q=1"`,
			expect:    `virtual_host = "legacy"` + "\n" + `status = 308` + "\n" + `location = "http://shop.example.com/p?q=1"`,
			wantRoute: "legacy", wantGot: `redirect 308 to "http://shop.example.com/p?q=1"`,
		},
		{
			name:      "redirect expectations that do not hold",
			request:   `host = "www.legacy.example.com"` + "\n" + `path = "/p"`,
			expect:    `status = 301` + "\n" + `location = "https://shop.example.com/p"` + "\n" + `service = "web"` + "\n" + `body = "x"` + "\n" + `timeout = "1s"` + "\n" + `rewrite_path = "/p"`,
			wantRoute: "legacy", wantGot: `redirect 308 to "http://shop.example.com/p"`,
			wantFails: []string{
				`status: expected 301, got redirect 308 to "http://shop.example.com/p"`,
				`location: expected "https://shop.example.com/p", got "http://shop.example.com/p"`,
				`service: expected cluster "web", got redirect 308 to "http://shop.example.com/p"`,
				`body: expected a direct response with body "x", got redirect 308 to "http://shop.example.com/p"`,
				`timeout: expected 1s, got redirect 308 to "http://shop.example.com/p"`,
				`rewrite_path: expected "/p", got redirect 308 to "http://shop.example.com/p"`,
			},
		},
		{
			name:      "direct response",
			request:   `host = "shop.example.com"` + "\n" + `path = "/healthz?full=1"`,
			expect:    `status = 200` + "\n" + `body = "ok\n"`,
			wantRoute: "healthz", wantGot: `direct response 200`,
		},
		{
			name:      "direct response expectations that do not hold",
			request:   `host = "shop.example.com"` + "\n" + `path = "/healthz"`,
			expect:    `status = 503` + "\n" + `body = "ok"` + "\n" + `location = "/"` + "\n" + `retries = 1`,
			wantRoute: "healthz", wantGot: `direct response 200`,
			wantFails: []string{
				`status: expected 503, got direct response 200`,
				`body: expected "ok", got "ok\n"`,
				`location: expected a redirect to "/", got direct response 200`,
				`retries: expected 1, got direct response 200`,
			},
		},
		{
			name:     "no route in a virtual host",
			listener: "admin",
			request:  `host = "anything"` + "\n" + `path = "/"`,
			expect:   `no_route = true` + "\n" + `status = 404` + "\n" + `virtual_host = "admin"`,
			wantGot:  `no route (404)`,
		},
		{
			name:    "no virtual host",
			request: `host = "example.org"`,
			expect:  `no_route = true` + "\n" + `status = 404`,
			wantGot: `no virtual host for host "example.org" (404)`,
		},
		{
			name:    "a route expected, none matched",
			request: `host = "example.org"`,
			expect:  `no_route = false` + "\n" + `virtual_host = "shop"` + "\n" + `status = 301` + "\n" + `service = "web"` + "\n" + `endpoints = 3`,
			wantGot: `no virtual host for host "example.org" (404)`,
			wantFails: []string{
				`no_route: expected a route, got no virtual host for host "example.org" (404)`,
				`virtual_host: expected "shop", got none (no domain matches "example.org")`,
				`status: expected 301, got no virtual host for host "example.org" (404)`,
				`service: expected cluster "web", got no virtual host for host "example.org" (404)`,
				`endpoints: expected 3, got no virtual host for host "example.org" (404); endpoints counts the endpoints of a route to one cluster`,
			},
		},
		{
			name:      "no route expected, a route matched",
			request:   `host = "shop.example.com"` + "\n" + `path = "/x"`,
			expect:    `no_route = true` + "\n" + `virtual_host = "shop"`,
			wantRoute: "web", wantGot: `cluster "web"`,
			wantFails: []string{`no_route: expected no route (404), got cluster "web"`},
		},
		{
			name:      "glob proxy group by node.cluster, its only listener",
			proxy:     "sidecar-web-3",
			request:   `host = "localhost:15000"`,
			expect:    `service = "web"`,
			wantRoute: "sidecar", wantGot: `cluster "web"`,
		},
		{
			name:      "unknown proxy group",
			proxy:     "gateway",
			request:   `host = "x"`,
			expect:    `service = "web"`,
			wantGot:   "not evaluated",
			wantFails: []string{`proxy: no proxy group matches "gateway"`},
		},
		{
			name:      "proxyless group",
			proxy:     "grpc-echo",
			request:   `host = "x"`,
			expect:    `service = "web"`,
			wantGot:   "not evaluated",
			wantFails: []string{`proxy: proxy group "grpc-*" is proxyless; route tests evaluate Envoy listeners`},
		},
		{
			name:      "several listeners need a name",
			proxy:     "edge",
			listener:  "-",
			request:   `host = "x"`,
			expect:    `service = "web"`,
			wantGot:   "not evaluated",
			wantFails: []string{`proxy: proxy group "edge" has 2 HTTP listeners ("http", "admin"); name one with listener = "NAME"`},
		},
		{
			name:      "unknown listener",
			listener:  "https",
			request:   `host = "x"`,
			expect:    `service = "web"`,
			wantGot:   "not evaluated",
			wantFails: []string{`listener: proxy group "edge" has no listener "https"`},
		},
		{
			name:      "tcp listener",
			listener:  "db",
			request:   `host = "x"`,
			expect:    `service = "postgres"`,
			wantGot:   "not evaluated",
			wantFails: []string{`listener: listener "db" of proxy group "edge" is a TCP listener; it has no routes`},
		},
	}
	cat := catalog(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			proxy := cmpOr(tc.proxy, "edge")
			listener := ""
			switch tc.listener {
			case "":
				if proxy == "edge" {
					listener = "listener = \"http\"\n"
				}
			case "-":
			default:
				listener = fmt.Sprintf("listener = %q\n", tc.listener)
			}
			src := fmt.Sprintf("route_test %q {\nproxy = %q\n%srequest {\n%s\n}\nexpect {\n%s\n}\n}\n", tc.name, proxy, listener, tc.request, tc.expect)
			results := run(t, src, cat)
			if len(results) != 1 {
				t.Fatalf("%d results", len(results))
			}
			r := results[0]
			wantRoute := ""
			if tc.wantRoute != "" {
				wantRoute = routeAt(t, tc.wantRoute)
			}
			if r.Route != wantRoute {
				t.Errorf("route = %q, want %q", r.Route, wantRoute)
			}
			if r.Got != tc.wantGot {
				t.Errorf("got = %q, want %q", r.Got, tc.wantGot)
			}
			var fails []string
			for _, f := range r.Failures {
				fails = append(fails, f.Message)
				if f.Subject.Filename != "tests.hcl" || f.Subject.Start.Line < 2 {
					t.Errorf("failure %q points at %s", f.Message, f.Subject)
				}
			}
			if strings.Join(fails, "\n") != strings.Join(tc.wantFails, "\n") {
				t.Errorf("failures:\n  %s\nwant:\n  %s", strings.Join(fails, "\n  "), strings.Join(tc.wantFails, "\n  "))
			}
			if r.Passed() != (len(tc.wantFails) == 0) {
				t.Errorf("Passed() = %v", r.Passed())
			}
		})
	}
}
