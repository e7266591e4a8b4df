package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// inVHost wraps virtual_host attributes and blocks so that body starts on
// line 5 of the document; the virtual host has one route to "web" after
// body.
func inVHost(body string) string {
	return `proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "shop" {
` + body + `
      route {
        service = "web"
      }
    }
  }
}
`
}

// checkFirst asserts that docs fail with want ("file:line:col: Summary")
// first, with detail in its Detail, and that every diagnostic has a
// position.
func checkFirst(t *testing.T, docs []string, want, detail string) {
	t.Helper()
	cfg, diags := loadDocs(false, docs...)
	if !diags.HasErrors() {
		t.Fatalf("no error; policy: %+v", cfg.Policy)
	}
	for _, d := range diags {
		if d.Subject == nil || d.Subject.Filename == "" || d.Subject.Start.Line < 1 {
			t.Errorf("diagnostic without a usable position: %s: %s", d.Summary, d.Detail)
		}
	}
	if got := firstLine(diags[0]); got != want {
		t.Errorf("first diagnostic = %q\n                 want %q\nall:\n  %s", got, want, strings.Join(FormatDiagnostics(diags), "\n  "))
	}
	if diags[0].Severity != hcl.DiagError {
		t.Errorf("first diagnostic is not an error: %v", diags[0].Severity)
	}
	if !strings.Contains(diags[0].Detail, detail) {
		t.Errorf("detail = %q\nwant it to contain %q", diags[0].Detail, detail)
	}
}

func TestHTTPFeatureDiagnostics(t *testing.T) {
	tests := map[string]struct {
		docs         []string
		want, detail string
	}{
		// --- cors ---
		"cors origin with a path": {
			docs:   []string{inVHost("      cors {\n        allow_origins = [\"https://a.example.com\", \"https://b.example.com/\"]\n      }")},
			want:   "a.hcl:6:51: Invalid CORS origin",
			detail: "without a path or trailing slash",
		},
		"cors origin in upper case": {
			docs:   []string{inVHost("      cors {\n        allow_origins = [\"https://Shop.example.com\"]\n      }")},
			want:   "a.hcl:6:26: Invalid CORS origin",
			detail: "lower case",
		},
		"cors without origins": {
			docs:   []string{inVHost("      cors {\n        allow_methods = [\"GET\"]\n      }")},
			want:   "a.hcl:5:7: CORS without origins",
			detail: "set allow_origins",
		},
		"cors bad origin regex": {
			docs:   []string{inRoute("        service = \"web\"\n        cors {\n          allow_origin_regex = [\"^https://(\"]\n        }", "")},
			want:   "a.hcl:8:33: Invalid regular expression",
			detail: "does not compile as RE2",
		},
		"cors origin regex over RE2's limit": {
			docs:   []string{inRoute("        service = \"web\"\n        cors {\n          allow_origin_regex = [\"^https://\\\\pL+$\"]\n        }", "")},
			want:   "a.hcl:8:33: Invalid regular expression",
			detail: "over Envoy's limit of 100",
		},
		"cors lower-case method": {
			docs:   []string{inVHost("      cors {\n        allow_origins = [\"*\"]\n        allow_methods = [\"GET\", \"post\"]\n      }")},
			want:   "a.hcl:7:33: Invalid method",
			detail: "upper-case HTTP method",
		},
		"cors bad header": {
			docs:   []string{inVHost("      cors {\n        allow_origins = [\"*\"]\n        expose_headers = [\"x request\"]\n      }")},
			want:   "a.hcl:7:27: Invalid header name",
			detail: "expose_headers",
		},
		"cors max_age not whole seconds": {
			docs:   []string{inVHost("      cors {\n        allow_origins = [\"*\"]\n        max_age = \"1500ms\"\n      }")},
			want:   "a.hcl:7:19: Invalid max_age",
			detail: "whole seconds",
		},
		"cors credentials for any origin": {
			docs:   []string{inVHost("      cors {\n        allow_origins = [\"*\"]\n        allow_credentials = true\n      }")},
			want:   "a.hcl:7:29: Credentials for any origin",
			detail: "list the origins instead",
		},
		"cors credentials inherited by a route that allows any origin": {
			docs:   []string{inVHost("      cors {\n        allow_origins = [\"https://a.example.com\"]\n        allow_credentials = true\n      }\n      route {\n        match {\n          path_prefix = \"/x\"\n        }\n        service = \"web\"\n        cors {\n          allow_origins = [\"*\"]\n        }\n      }")},
			want:   "a.hcl:14:9: Credentials for any origin",
			detail: "Envoy echoes the request's Origin",
		},
		// --- rate_limit ---
		"rate_limit of no requests": {
			docs:   []string{inVHost("      rate_limit {\n        requests = 0\n      }")},
			want:   "a.hcl:6:20: Invalid requests",
			detail: "must be a positive integer",
		},
		"rate_limit interval below 50ms": {
			docs:   []string{inVHost("      rate_limit {\n        requests = 1\n        interval = \"10ms\"\n      }")},
			want:   "a.hcl:7:20: Invalid interval",
			detail: "at most every 50ms",
		},
		"rate_limit burst below requests": {
			docs:   []string{inVHost("      rate_limit {\n        requests = 10\n        burst = 5\n      }")},
			want:   "a.hcl:7:17: Invalid burst",
			detail: "burst 5 is below requests 10",
		},
		"rate_limit status not an error": {
			docs:   []string{inVHost("      rate_limit {\n        requests = 10\n        status = 200\n      }")},
			want:   "a.hcl:7:18: Invalid status",
			detail: "between 400 and 599",
		},
		"rate_limit descriptor with header and client_address": {
			docs:   []string{inVHost("      rate_limit {\n        requests = 10\n        descriptor {\n          header = \"x-key\"\n          client_address = true\n          requests = 1\n        }\n      }")},
			want:   "a.hcl:7:9: Invalid descriptor",
			detail: "exactly one of them",
		},
		"rate_limit descriptor interval not a multiple": {
			docs:   []string{inVHost("      rate_limit {\n        requests = 10\n        interval = \"2s\"\n        descriptor {\n          header = \"x-key\"\n          requests = 1\n          interval = \"3s\"\n        }\n      }")},
			want:   "a.hcl:11:22: Invalid descriptor interval",
			detail: "not a multiple of the rate_limit's own interval 2s",
		},
		"rate_limit duplicate descriptor": {
			docs:   []string{inVHost("      rate_limit {\n        requests = 10\n        descriptor {\n          header = \"x-key\"\n          requests = 1\n        }\n        descriptor {\n          header = \"X-Key\"\n          requests = 2\n        }\n      }")},
			want:   "a.hcl:11:9: Duplicate descriptor",
			detail: "already defined at a.hcl:7:9",
		},
		"rate_limit on a tcp listener": {
			docs:   []string{inListener("    port = 5432\n    protocol = \"tcp\"\n    service = \"db\"\n    rate_limit {\n      requests = 1\n    }")},
			want:   "a.hcl:6:5: rate_limit on a tcp listener",
			detail: "counts HTTP requests",
		},
		"rate_limit in a grpc_service": {
			docs:   []string{inGRPC("    service = \"echo\"\n    rate_limit {\n      requests = 1\n    }", "")},
			want:   "a.hcl:4:5: Unsupported in a grpc_service",
			detail: "no rate limit filter",
		},
		// --- compression ---
		"compression algorithm unknown": {
			docs:   []string{inListener("    port = 8080\n    compression {\n      algorithms = [\"gzip\", \"deflate\"]\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
			want:   "a.hcl:5:29: Invalid compression algorithm",
			detail: `is not one of "gzip", "brotli", "zstd"`,
		},
		"compression algorithm twice": {
			docs:   []string{inListener("    port = 8080\n    compression {\n      algorithms = [\"gzip\", \"gzip\"]\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
			want:   "a.hcl:5:29: Duplicate compression algorithm",
			detail: "listed twice",
		},
		"compression content type with parameters": {
			docs:   []string{inListener("    port = 8080\n    compression {\n      content_types = [\"text/html; charset=utf-8\"]\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
			want:   "a.hcl:5:24: Invalid content type",
			detail: "no parameters",
		},
		"compression negative min_length": {
			docs:   []string{inListener("    port = 8080\n    compression {\n      min_length = -1\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
			want:   "a.hcl:5:20: Invalid min_length",
			detail: "must be between 0",
		},
		"compression on a tcp listener": {
			docs:   []string{inListener("    port = 5432\n    protocol = \"tcp\"\n    service = \"db\"\n    compression {\n    }")},
			want:   "a.hcl:6:5: compression on a tcp listener",
			detail: "cannot compress",
		},
		"compression in a grpc_service": {
			docs:   []string{inGRPC("    service = \"echo\"\n    compression = false", "")},
			want:   "a.hcl:4:19: Unsupported in a grpc_service",
			detail: "grpc-encoding",
		},
		// --- access_log ---
		"access_log with path and collector": {
			docs:   []string{inListener("    port = 8080\n    access_log {\n      path = \"/dev/stdout\"\n      collector = \"otel\"\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
			want:   "a.hcl:4:5: Invalid access_log",
			detail: "exactly one of them",
		},
		"access_log relative path": {
			docs:   []string{inListener("    port = 8080\n    access_log {\n      path = \"envoy.log\"\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
			want:   "a.hcl:5:14: Invalid access_log path",
			detail: "must be absolute",
		},
		"access_log format and json": {
			docs:   []string{inListener("    port = 8080\n    access_log {\n      path = \"/dev/stdout\"\n      format = \"%START_TIME%\"\n      json = { a = \"%DURATION%\" }\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
			want:   "a.hcl:7:14: Conflicting access_log formats",
			detail: "not both",
		},
		"access_log unclosed operator": {
			docs:   []string{inListener("    port = 8080\n    access_log {\n      path = \"/dev/stdout\"\n      format = \"%START_TIME% %DURATION\"\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
			want:   "a.hcl:6:16: Invalid access_log format",
			detail: "unclosed command operator",
		},
		"access_log status class": {
			docs:   []string{inListener("    port = 8080\n    access_log {\n      path = \"/dev/stdout\"\n      status_classes = [\"5xx\", \"50x\"]\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
			want:   "a.hcl:6:32: Invalid status class",
			detail: `is not one of "1xx"`,
		},
		"access_log sample above 100": {
			docs:   []string{inListener("    port = 8080\n    access_log {\n      path = \"/dev/stdout\"\n      sample_percent = 120\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
			want:   "a.hcl:6:24: Invalid sample_percent",
			detail: "not a percentage",
		},
		"access_log collector whose service is not http2": {
			docs:   []string{inListener("    port = 8080\n    access_log {\n      collector = \"otel\"\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }") + "service \"otel\" {\n  connect_timeout = \"1s\"\n}\n"},
			want:   "a.hcl:5:19: gRPC service without http2",
			detail: "set http2 = true in service \"otel\"",
		},
		"access_log collector is a subset": {
			docs:   []string{inListener("    port = 8080\n    access_log {\n      collector = \"otel.v2\"\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
			want:   "a.hcl:5:19: Invalid service name",
			detail: "without a subset",
		},
		"access_log on a tcp listener": {
			docs:   []string{inListener("    port = 5432\n    protocol = \"tcp\"\n    service = \"db\"\n    access_log {\n      path = \"/dev/stdout\"\n    }")},
			want:   "a.hcl:6:5: access_log on a tcp listener",
			detail: "HTTP connection manager",
		},
		// --- retry budget and back-off ---
		"retry_budget percent 0": {
			docs:   []string{"service \"api\" {\n  circuit_breaker {\n    retry_budget {\n      percent = 0\n    }\n  }\n}\n"},
			want:   "a.hcl:4:17: Invalid percent",
			detail: "must be above 0",
		},
		"retry_budget with max_retries": {
			docs:   []string{"service \"api\" {\n  circuit_breaker {\n    max_retries = 3\n    retry_budget {\n    }\n  }\n}\n"},
			want:   "a.hcl:3:19: max_retries with retry_budget",
			detail: "keep one of them",
		},
		"retry max_interval below base": {
			docs:   []string{inRoute("        service = \"web\"\n        retry {\n          base_interval = \"1s\"\n          max_interval = \"100ms\"\n        }", "")},
			want:   "a.hcl:9:26: Invalid max_interval",
			detail: "below base_interval 1s",
		},
		"retry max_interval alone": {
			docs:   []string{inRoute("        service = \"web\"\n        retry {\n          max_interval = \"100ms\"\n        }", "")},
			want:   "a.hcl:8:26: max_interval without base_interval",
			detail: "set base_interval too",
		},
		// --- tracing ---
		"tracing sample above 100": {
			docs:   []string{inListener("    port = 8080\n    tracing {\n      collector = \"otel\"\n      sample_percent = 101\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
			want:   "a.hcl:6:24: Invalid sample_percent",
			detail: "not a percentage",
		},
		"tracing collector without http2": {
			docs:   []string{inListener("    port = 8080\n    tracing {\n      collector = \"otel\"\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }") + "service \"otel\" {\n  http2 = false\n}\n"},
			want:   "a.hcl:5:19: gRPC service without http2",
			detail: "tracing collector",
		},
		"tracing without collector": {
			docs:   []string{inListener("    port = 8080\n    tracing {\n      sample_percent = 1\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
			want:   "a.hcl:4:13: Missing required argument",
			detail: `"collector" is required`,
		},
		"tracing on a tcp listener": {
			docs:   []string{inListener("    port = 5432\n    protocol = \"tcp\"\n    service = \"db\"\n    tracing {\n      collector = \"otel\"\n    }")},
			want:   "a.hcl:6:5: tracing on a tcp listener",
			detail: "per HTTP request",
		},
		// --- upgrades ---
		"upgrade CONNECT": {
			docs:   []string{inRoute("        service = \"web\"\n        upgrades = [\"websocket\", \"CONNECT\"]", "")},
			want:   "a.hcl:7:34: Unsupported upgrade",
			detail: "CONNECT is a method",
		},
		"upgrade twice": {
			docs:   []string{inRoute("        service = \"web\"\n        upgrades = [\"websocket\", \"WebSocket\"]", "")},
			want:   "a.hcl:7:34: Duplicate upgrade",
			detail: "listed twice",
		},
		"upgrade on a redirect": {
			docs:   []string{inRoute("        redirect {\n          scheme = \"https\"\n        }\n        upgrades = [\"websocket\"]", "")},
			want:   "a.hcl:9:20: upgrades without a service",
			detail: "not to redirects",
		},
		"upgrades on a tcp listener": {
			docs:   []string{inListener("    port = 5432\n    protocol = \"tcp\"\n    service = \"db\"\n    upgrades = [\"websocket\"]")},
			want:   "a.hcl:6:16: upgrades on a tcp listener",
			detail: "apply to http listeners",
		},
		"upgrades in a grpc_service": {
			docs:   []string{inGRPC("    service = \"echo\"\n    upgrades = [\"websocket\"]", "")},
			want:   "a.hcl:4:16: Unsupported in a grpc_service",
			detail: "never upgraded",
		},
		"cors in a grpc_service": {
			docs:   []string{inGRPC("    service = \"echo\"\n    cors {\n      allow_origins = [\"*\"]\n    }", "")},
			want:   "a.hcl:4:5: Unsupported in a grpc_service",
			detail: "no CORS filter",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) { checkFirst(t, tc.docs, tc.want, tc.detail) })
	}
}

// A route's cors block inherits what it leaves out from its virtual
// host's; a route without one has none of its own (Envoy applies the
// virtual host's).
func TestCORSInheritance(t *testing.T) {
	cfg, diags := loadDocs(false, inVHost(`      cors {
        allow_origins     = ["https://shop.example.com"]
        allow_methods     = ["GET"]
        max_age           = "1h"
        allow_credentials = true
      }
      route {
        match {
          path_prefix = "/api/"
        }
        service = "api"
        cors {
          allow_methods = ["GET", "PUT"]
        }
      }`))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	vh := cfg.Policy.Proxies[0].Listeners[0].VirtualHosts[0]
	wantVH := &ir.CORS{AllowOrigins: []string{"https://shop.example.com"}, AllowMethods: []string{"GET"}, MaxAge: time.Hour, AllowCredentials: true}
	if diff := cmp.Diff(wantVH, vh.HTTP.CORS); diff != "" {
		t.Errorf("virtual host (-want +got):\n%s", diff)
	}
	wantRoute := *wantVH
	wantRoute.AllowMethods = []string{"GET", "PUT"}
	if diff := cmp.Diff(&wantRoute, vh.Routes[0].HTTP.CORS); diff != "" {
		t.Errorf("route (-want +got):\n%s", diff)
	}
	if vh.Routes[1].HTTP.CORS != nil {
		t.Errorf("route without cors got %+v", vh.Routes[1].HTTP.CORS)
	}
}
