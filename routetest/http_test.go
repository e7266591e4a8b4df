package routetest_test

import (
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/routetest"
)

const httpPolicy = `
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "shop" {
      domains = ["shop.example.com"]
      cors {
        allow_origins      = ["https://shop.example.com"]
        allow_origin_regex = ["https://[a-z]+\\.shop\\.example\\.com"]
        allow_methods      = ["GET", "POST"]
        allow_headers      = ["content-type"]
        expose_headers     = ["x-request-id"]
        max_age            = "10m"
        allow_credentials  = true
      }
      route {
        match {
          path_prefix = "/api/"
        }
        service = "api"
        cors {
          allow_methods = ["GET", "PUT"]
        }
      }
      route {
        service = "web"
      }
    }
    virtual_host "plain" {
      domains = ["plain.example.com"]
      route {
        service = "web"
      }
    }
  }
}
`

const rateLimitPolicy = `
proxy "edge" {
  listener "http" {
    port = 8080
    rate_limit {
      requests = 1000
    }
    virtual_host "shop" {
      domains = ["shop.example.com"]
      rate_limit {
        requests = 100
      }
      route {
        match {
          path_prefix = "/api/"
        }
        service = "api"
        rate_limit {
          requests = 50
          descriptor {
            header   = "x-api-key"
            requests = 5
          }
          descriptor {
            header   = "x-api-key"
            value    = "partner"
            requests = 40
          }
          descriptor {
            client_address = true
            requests       = 10
          }
        }
      }
      route {
        service = "web"
      }
    }
    virtual_host "other" {
      route {
        service = "web"
      }
    }
  }
}
`

// runWith decodes the route tests in src and runs them against pol.
func runWith(t *testing.T, pol, src string) []*routetest.Result {
	t.Helper()
	p, tests := parse(t, "policy.hcl", pol), parse(t, "tests.hcl", src)
	cfg, diags := policy.Merge(p, tests)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	decoded, diags := routetest.Decode(p, tests)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	results, diags := routetest.Run(cfg.Policy, nil, decoded)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return results
}

func TestHTTPExpectations(t *testing.T) {
	tests := map[string]struct {
		policy          string // default httpPolicy
		request, expect string
		wantGot         string
		wantFails       []string
	}{
		"rate limit of the route, descriptors by header value and client": {
			policy:  rateLimitPolicy,
			request: "host = \"shop.example.com\"\npath = \"/api/x\"\nheaders = { \"X-Api-Key\" = \"partner\" }",
			expect:  "rate_limit = \"route\"\nrate_limit_descriptors = [\"x-api-key=partner\", \"client_address\"]",
			wantGot: `cluster "api"`,
		},
		"another key takes the wildcard bucket": {
			policy:  rateLimitPolicy,
			request: "host = \"shop.example.com\"\npath = \"/api/x\"\nheaders = { \"x-api-key\" = \"abc\" }",
			expect:  "rate_limit_descriptors = [\"client_address\", \"x-api-key\"]",
			wantGot: `cluster "api"`,
		},
		"no key: the client bucket only": {
			policy:  rateLimitPolicy,
			request: "host = \"shop.example.com\"\npath = \"/api/x\"",
			expect:  "rate_limit_descriptors = [\"client_address\", \"x-api-key\"]",
			wantGot: `cluster "api"`,
			wantFails: []string{
				`rate_limit_descriptors: expected ["client_address", "x-api-key"], got ["client_address"]`,
			},
		},
		"the virtual host's rate limit": {
			policy:  rateLimitPolicy,
			request: "host = \"shop.example.com\"",
			expect:  "rate_limit = \"virtual_host\"\nrate_limit_descriptors = []",
			wantGot: `cluster "web"`,
		},
		"the listener's rate limit": {
			policy:    rateLimitPolicy,
			request:   "host = \"other.example.com\"",
			expect:    "rate_limit = \"route\"",
			wantGot:   `cluster "web"`,
			wantFails: []string{`rate_limit: expected the route's rate_limit, got listener`},
		},
		"no rate limit": {
			request: "host = \"plain.example.com\"",
			expect:  "rate_limit = \"none\"",
			wantGot: `cluster "web"`,
		},
		"preflight from an allowed origin, route policy over the virtual host's": {
			request: `host = "shop.example.com"
path = "/api/cart"
method = "OPTIONS"
headers = { Origin = "https://shop.example.com", "Access-Control-Request-Method" = "PUT" }`,
			expect: `cors_preflight = true
status = 200
cors_headers = { "access-control-allow-origin" = "https://shop.example.com", "access-control-allow-methods" = "GET,PUT", "access-control-allow-headers" = "content-type", "access-control-max-age" = "600", "access-control-allow-credentials" = "true", "access-control-expose-headers" = "" }`,
			wantGot: "a CORS preflight Envoy answers (200)",
		},
		"preflight from an origin the regex allows": {
			request: `host = "shop.example.com"
method = "OPTIONS"
headers = { origin = "https://eu.shop.example.com", "access-control-request-method" = "POST" }`,
			expect: `cors_preflight = true
cors_headers = { "access-control-allow-methods" = "GET,POST" }`,
			wantGot: "a CORS preflight Envoy answers (200)",
		},
		"preflight from another origin goes upstream": {
			request: `host = "shop.example.com"
method = "OPTIONS"
headers = { origin = "https://evil.example.net", "access-control-request-method" = "POST" }`,
			expect: `cors_preflight = false
service = "web"
cors_headers = { "access-control-allow-origin" = "" }`,
			wantGot: `cluster "web"`,
		},
		"an actual request gets allow-origin and expose-headers": {
			request: `host = "shop.example.com"
path = "/api/cart"
method = "POST"
headers = { origin = "https://shop.example.com" }`,
			expect: `cors_preflight = false
service = "api"
cors_headers = { "access-control-allow-origin" = "https://shop.example.com", "access-control-expose-headers" = "x-request-id", "access-control-allow-methods" = "" }`,
			wantGot: `cluster "api"`,
		},
		"no policy on the virtual host": {
			request: `host = "plain.example.com"
method = "OPTIONS"
headers = { origin = "https://shop.example.com", "access-control-request-method" = "POST" }`,
			expect:  `cors_preflight = true`,
			wantGot: `cluster "web"`,
			wantFails: []string{
				"cors_preflight: expected true, got false: Envoy does not answer it as a preflight: no cors policy of the route or its virtual host allows the origin",
			},
		},
		"an OPTIONS without Access-Control-Request-Method is no preflight": {
			request: `host = "shop.example.com"
method = "OPTIONS"
headers = { origin = "https://shop.example.com" }`,
			expect:  `cors_preflight = true`,
			wantGot: `cluster "web"`,
			wantFails: []string{
				"cors_preflight: expected true, got false: Envoy does not answer it as a preflight: a preflight is OPTIONS with Access-Control-Request-Method",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			src := "route_test \"t\" {\n  proxy = \"edge\"\n  request {\n" + tc.request + "\n  }\n  expect {\n" + tc.expect + "\n  }\n}\n"
			pol := httpPolicy
			if tc.policy != "" {
				pol = tc.policy
			}
			res := runWith(t, pol, src)[0]
			if res.Got != tc.wantGot {
				t.Errorf("got %q, want %q", res.Got, tc.wantGot)
			}
			var fails []string
			for _, f := range res.Failures {
				fails = append(fails, f.Message)
			}
			if strings.Join(fails, "\n") != strings.Join(tc.wantFails, "\n") {
				t.Errorf("failures:\n  %s\nwant:\n  %s", strings.Join(fails, "\n  "), strings.Join(tc.wantFails, "\n  "))
			}
		})
	}
}
