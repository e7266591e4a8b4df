package policy

import "strings"

var routeDiagnosticCases = map[string]diagCase{
	"zone aware percent out of range": {
		docs:   []string{"service \"api\" {\n  zone_aware {\n    routing_percent = 150\n  }\n}\n"},
		want:   "a.hcl:3:23: Invalid routing_percent",
		detail: "not a percentage between 0 and 100",
	},
	"local service not queryable": {
		docs:   []string{"proxy \"w\" {\n  local_service = \"a/b\"\n  upstreams = [\"x\"]\n}\n"},
		want:   "a.hcl:2:19: Invalid service name",
		detail: "cannot query this name",
	},
	// --- routes ---
	"route with zero actions": {
		docs:   []string{inRoute(`        timeout = "1s"`, "")},
		want:   "a.hcl:5:7: Route needs exactly one action",
		detail: `has 0 actions; use exactly one of service = "...", split blocks, redirect or direct_response`,
	},
	"route with service and redirect": {
		docs:   []string{inRoute("        service = \"web\"\n        redirect {\n          scheme = \"https\"\n        }", "")},
		want:   "a.hcl:5:7: Route needs exactly one action",
		detail: "has 2 actions",
	},
	"subset without service": {
		docs:   []string{inRoute("        subset = \"v2\"\n        redirect {\n          scheme = \"https\"\n        }", apiWithV2)},
		want:   "a.hcl:6:18: subset without service",
		detail: `add service = "..."`,
	},
	"split weight 0": {
		docs:   []string{inRoute("        split {\n          service = \"api\"\n          weight  = 100\n        }\n        split {\n          service = \"api\"\n          weight  = 0\n        }", "")},
		want:   "a.hcl:12:21: Invalid split weight",
		detail: "remove the split to send it nothing",
	},
	"split weights overflow uint32": {
		docs:   []string{inRoute("        split {\n          service = \"api\"\n          weight  = 4000000000\n        }\n        split {\n          service = \"web\"\n          weight  = 4000000000\n        }", "")},
		want:   "a.hcl:5:7: Split weights too large",
		detail: "scale them down",
	},
	"unknown subset in a split": {
		docs:   []string{inRoute("        split {\n          service = \"api\"\n          weight  = 90\n        }\n        split {\n          service = \"api\"\n          subset  = \"v3\"\n          weight  = 10\n        }", apiWithV2)},
		want:   "a.hcl:12:21: Unknown subset",
		detail: `declare it in service "api" { subset "v3" { tags = [...] } }`,
	},
	"unknown subset in route subset": {
		docs:   []string{inRoute("        service = \"web\"\n        subset  = \"blue\"", apiWithV2)},
		want:   "a.hcl:7:19: Unknown subset",
		detail: "no subsets are declared for it",
	},
	"unknown subset in mirror": {
		docs:   []string{inRoute("        service = \"api\"\n        mirror {\n          service = \"api\"\n          subset  = \"shadow\"\n        }", apiWithV2)},
		want:   "a.hcl:9:21: Unknown subset",
		detail: `subset "shadow" of service "api" is not declared (declared subsets: "v2")`,
	},
	"mirror percent above 100": {
		docs:   []string{inRoute("        service = \"api\"\n        mirror {\n          service = \"api-shadow\"\n          percent = 120\n        }", "")},
		want:   "a.hcl:9:21: Invalid percent",
		detail: "not a percentage between 0 and 100",
	},
	"path_regex that does not compile": {
		docs:   []string{inRoute("        service = \"web\"\n        match {\n          path_regex = \"/users/(\\\\d+\"\n        }", "")},
		want:   "a.hcl:8:24: Invalid regular expression",
		detail: "does not compile as RE2: error parsing regexp: missing closing )",
	},
	"path_regex over Envoy's RE2 program size limit": {
		docs:   []string{inRoute("        service = \"web\"\n        match {\n          path_regex = \"/users/\\\\pL+\"\n        }", "")},
		want:   "a.hcl:8:24: Invalid regular expression",
		detail: "compiles to an RE2 program of about",
	},
	"path_regex of 100 KB": {
		docs:   []string{inRoute("        service = \"web\"\n        match {\n          path_regex = \"/"+strings.Repeat("a", 100<<10)+"\"\n        }", "")},
		want:   "a.hcl:8:24: Invalid regular expression",
		detail: "is 102401 bytes long, longer than any pattern Envoy accepts",
	},
	"header regex that does not compile": {
		docs:   []string{inRoute("        service = \"web\"\n        match {\n          header \"x-version\" {\n            regex = \"v[0-9\"\n          }\n        }", "")},
		want:   "a.hcl:9:21: Invalid regular expression",
		detail: "missing closing ]",
	},
	"rewrite regex that does not compile": {
		docs:   []string{inRoute("        service = \"web\"\n        rewrite {\n          regex        = \"^/v1/(.*\"\n          substitution = \"/\\\\1\"\n        }", "")},
		want:   "a.hcl:8:26: Invalid regular expression",
		detail: "does not compile as RE2",
	},
	"rewrite regex without substitution": {
		docs:   []string{inRoute("        service = \"web\"\n        rewrite {\n          regex = \"^/v1/(.*)$\"\n        }", "")},
		want:   "a.hcl:8:19: Missing substitution",
		detail: `needs substitution = "..."`,
	},
	"rewrite on a redirect": {
		docs:   []string{inRoute("        redirect {\n          scheme = \"https\"\n        }\n        rewrite {\n          prefix = \"/\"\n        }", "")},
		want:   "a.hcl:9:9: rewrite without a service",
		detail: "only to routes that forward to a service",
	},
	"conflicting path matches": {
		docs:   []string{inRoute("        service = \"web\"\n        match {\n          path        = \"/a\"\n          path_prefix = \"/b\"\n        }", "")},
		want:   "a.hcl:7:9: Conflicting path matches",
		detail: "may use one of path_prefix, path or path_regex",
	},
	"path_prefix without slash": {
		docs:   []string{inRoute("        service = \"web\"\n        match {\n          path_prefix = \"api\"\n        }", "")},
		want:   "a.hcl:8:25: Invalid path_prefix",
		detail: `must start with "/"`,
	},
	"header matcher with no match kind": {
		docs:   []string{inRoute("        service = \"web\"\n        match {\n          header \"x-canary\" {\n            invert = true\n          }\n        }", "")},
		want:   "a.hcl:8:11: Invalid header match",
		detail: "needs exactly one of exact, prefix, regex or present; it has 0",
	},
	"header matcher with two match kinds": {
		docs:   []string{inRoute("        service = \"web\"\n        match {\n          header \"x-canary\" {\n            exact  = \"1\"\n            prefix = \"1\"\n          }\n        }", "")},
		want:   "a.hcl:8:11: Invalid header match",
		detail: "it has 2",
	},
	"query matcher present = false": {
		docs:   []string{inRoute("        service = \"web\"\n        match {\n          query \"debug\" {\n            present = false\n          }\n        }", "")},
		want:   "a.hcl:9:23: Invalid present",
		detail: "cannot match the absence of a query parameter",
	},
	"query matcher invert": {
		docs:   []string{inRoute("        service = \"web\"\n        match {\n          query \"debug\" {\n            exact  = \"1\"\n            invert = true\n          }\n        }", "")},
		want:   "a.hcl:10:22: invert on a query match",
		detail: "cannot invert a query parameter match",
	},
	"bad method": {
		docs:   []string{inRoute("        service = \"web\"\n        match {\n          method = \"get\"\n        }", "")},
		want:   "a.hcl:8:20: Invalid method",
		detail: `upper-case HTTP method such as "GET"`,
	},
	"bad retry on value": {
		docs:   []string{inRoute("        service = \"web\"\n        retry {\n          attempts = 3\n          on       = [\"5xx\", \"timeout\"]\n        }", "")},
		want:   "a.hcl:9:30: Invalid retry condition",
		detail: `"timeout" is not one of Envoy's retry_on conditions: 5xx, gateway-error`,
	},
	"zero retry attempts": {
		docs:   []string{inRoute("        service = \"web\"\n        retry {\n          attempts = 0\n        }", "")},
		want:   "a.hcl:8:22: Invalid attempts",
		detail: "must be a positive integer",
	},
	"negative route timeout": {
		docs:   []string{inRoute("        service = \"web\"\n        timeout = \"-3s\"", "")},
		want:   "a.hcl:7:19: Invalid duration",
		detail: "must be positive",
	},
	"bad redirect status": {
		docs:   []string{inRoute("        redirect {\n          host   = \"www.example.com\"\n          status = 200\n        }", "")},
		want:   "a.hcl:8:20: Invalid redirect status",
		detail: "not one of 301, 302, 303, 307, 308",
	},
	"bad redirect scheme": {
		docs:   []string{inRoute("        redirect {\n          scheme = \"ftp\"\n        }", "")},
		want:   "a.hcl:7:20: Invalid scheme",
		detail: `is not "http" or "https"`,
	},
	"direct_response status 700": {
		docs:   []string{inRoute("        direct_response {\n          status = 700\n          body   = \"nope\"\n        }", "")},
		want:   "a.hcl:7:20: Invalid status",
		detail: "not between 200 and 599",
	},
	"fault with nothing": {
		docs:   []string{inRoute("        service = \"web\"\n        fault {\n        }", "")},
		want:   "a.hcl:7:9: Empty fault",
		detail: "needs a delay block, an abort block, or both",
	},
	"fault percent 150": {
		docs:   []string{inRoute("        service = \"web\"\n        fault {\n          abort {\n            status  = 503\n            percent = 150\n          }\n        }", "")},
		want:   "a.hcl:10:23: Invalid percent",
		detail: "percent = 150 is not a percentage between 0 and 100",
	},
	"fault delay without duration": {
		docs:   []string{inRoute("        service = \"web\"\n        fault {\n          delay {\n            percent = 10\n          }\n        }", "")},
		want:   "a.hcl:8:11: Missing fault delay duration",
		detail: `delay needs duration = "..."`,
	},
	"header mutation of :path": {
		docs:   []string{inRoute("        service = \"web\"\n        request_headers {\n          set = {\n            \"x-env\" = \"prod\"\n            \":path\" = \"/\"\n          }\n        }", "")},
		want:   "a.hcl:10:13: Invalid header",
		detail: "pseudo-headers and Host are off limits",
	},
	"header mutation of host": {
		docs:   []string{inRoute("        service = \"web\"\n        request_headers {\n          remove = [\"x-debug\", \"Host\"]\n        }", "")},
		want:   "a.hcl:8:32: Invalid header",
		detail: `use rewrite { host = "..." } to change the host`,
	},
	"header mutation with a bad name": {
		docs:   []string{inRoute("        service = \"web\"\n        response_headers {\n          add = {\n            \"x powered by\" = \"bridge\"\n          }\n        }", "")},
		want:   "a.hcl:9:13: Invalid header",
		detail: "is not a valid HTTP header name",
	},

	// --- documents and merging ---
	"daemon settings in a KV document": {
		docs:   []string{"service \"api\" {\n}\n\nconsul {\n  address = \"10.0.0.1:8500\"\n}\n"},
		kv:     true,
		want:   "xds-bridge/policy/a:4:1: Daemon settings in KV",
		detail: "may only appear in -config files",
	},
	"bad route in a KV document": {
		docs:   []string{inRoute("        service = \"web\"\n        timeout = \"soon\"", "")},
		kv:     true,
		want:   "xds-bridge/policy/a:7:19: Invalid duration",
		detail: "use Go syntax",
	},
	"export_all_services conflicting across documents": {
		docs:   []string{"export_all_services = true\n", "\nexport_all_services = false\n"},
		want:   "b.hcl:2:23: Conflicting export_all_services",
		detail: "is false here but true at a.hcl:1:23; set it in one place",
	},
	"duplicate settings block across documents": {
		docs:   []string{"log {\n  level = \"debug\"\n}\n", "\nlog {\n  level = \"info\"\n}\n"},
		want:   "b.hcl:2:1: Duplicate log block",
		detail: "previous definition at a.hcl:1:1",
	},
	// --- grpc_service and proxyless groups ---
	"grpc_service redirect": {
		docs:   []string{inGRPC("    redirect {\n      host = \"x\"\n    }", "")},
		want:   "a.hcl:3:5: Unsupported in a grpc_service",
		detail: "cannot answer a call with a redirect",
	},
	"grpc_service direct_response": {
		docs:   []string{inGRPC("    direct_response {\n      status = 404\n    }", "")},
		want:   "a.hcl:3:5: Unsupported in a grpc_service",
		detail: "use fault { abort { ... } }",
	},
	"grpc_service rewrite": {
		docs:   []string{inGRPC("    service = \"echo\"\n    rewrite {\n      prefix = \"/\"\n    }", "")},
		want:   "a.hcl:4:5: Unsupported in a grpc_service",
		detail: "does not rewrite the path",
	},
	"grpc_service regex rewrite": {
		docs:   []string{inGRPC("    service = \"echo\"\n    rewrite {\n      regex        = \"^/a/(.*)$\"\n      substitution = \"/\\\\1\"\n    }", "")},
		want:   "a.hcl:4:5: Unsupported in a grpc_service",
		detail: "does not rewrite the path",
	},
	"grpc_service mirror": {
		docs:   []string{inGRPC("    service = \"echo\"\n    mirror {\n      service = \"echo-shadow\"\n    }", "")},
		want:   "a.hcl:4:5: Unsupported in a grpc_service",
		detail: "does not mirror calls",
	},
	"grpc_service request_headers": {
		docs:   []string{inGRPC("    service = \"echo\"\n    request_headers {\n      set = { \"x-env\" = \"prod\" }\n    }", "")},
		want:   "a.hcl:4:5: Unsupported in a grpc_service",
		detail: "does not change metadata",
	},
	"grpc_service response_headers": {
		docs:   []string{inGRPC("    service = \"echo\"\n    response_headers {\n      remove = [\"x-debug\"]\n    }", "")},
		want:   "a.hcl:4:5: Unsupported in a grpc_service",
		detail: "does not change metadata",
	},
	"grpc_service idle_timeout": {
		docs:   []string{inGRPC("    service      = \"echo\"\n    idle_timeout = \"5s\"", "")},
		want:   "a.hcl:4:20: Unsupported in a grpc_service",
		detail: "no per-route idle timeout",
	},
	"grpc_service method match": {
		docs:   []string{inGRPC("    match {\n      method = \"GET\"\n    }\n    service = \"echo\"", "")},
		want:   "a.hcl:4:16: Unsupported in a grpc_service",
		detail: "every gRPC call is an HTTP POST",
	},
	"grpc_service query match": {
		docs:   []string{inGRPC("    match {\n      query \"debug\" {\n        present = true\n      }\n    }\n    service = \"echo\"", "")},
		want:   "a.hcl:4:7: Unsupported in a grpc_service",
		detail: "no query string",
	},
	"grpc_service pseudo-header match": {
		docs:   []string{inGRPC("    match {\n      header \":authority\" {\n        exact = \"echo\"\n      }\n    }\n    service = \"echo\"", "")},
		want:   "a.hcl:4:7: Unsupported in a grpc_service",
		detail: "not pseudo-headers",
	},
	"grpc_service grpc- header match": {
		docs:   []string{inGRPC("    match {\n      header \"grpc-timeout\" {\n        present = true\n      }\n    }\n    service = \"echo\"", "")},
		want:   "a.hcl:4:7: Unsupported in a grpc_service",
		detail: "never match",
	},
	"grpc_service per_try_timeout": {
		docs:   []string{inGRPC("    service = \"echo\"\n    retry {\n      per_try_timeout = \"1s\"\n    }", "")},
		want:   "a.hcl:5:25: Unsupported in a grpc_service",
		detail: "no per-try timeout",
	},
	"grpc_service retry on an HTTP condition": {
		docs:   []string{inGRPC("    service = \"echo\"\n    retry {\n      on = [\"unavailable\", \"5xx\"]\n    }", "")},
		want:   "a.hcl:5:28: Invalid retry condition for gRPC",
		detail: `"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"`,
	},
	"grpc_service to a random lb_policy service": {
		docs:   []string{inGRPC("    service = \"echo\"", "service \"echo\" {\n  lb_policy = \"random\"\n}\n")},
		want:   "a.hcl:3:15: lb_policy not supported by gRPC",
		detail: "supports round_robin and ring_hash",
	},
	"grpc_service split to a tls service": {
		docs:   []string{inGRPC("    split {\n      service = \"echo\"\n      weight  = 1\n    }", ""), "service \"echo\" {\n  tls {\n    sni = \"echo\"\n  }\n}\n"},
		want:   "a.hcl:4:17: tls not supported by gRPC",
		detail: "accepts only certificate providers",
	},
	"grpc_service unknown subset": {
		docs:   []string{inGRPC("    service = \"echo\"\n    subset  = \"v3\"", "service \"echo\" {\n  subset \"v2\" {\n    tags = [\"v2\"]\n  }\n}\n")},
		want:   "a.hcl:4:15: Unknown subset",
		detail: `declared subsets: "v2"`,
	},
	"grpc_service without routes": {
		docs:   []string{"\ngrpc_service \"echo\" {\n}\n"},
		want:   "a.hcl:2:1: grpc_service without routes",
		detail: "every call to xds:///echo would fail",
	},
	"grpc_service with an invalid name": {
		docs:   []string{inGRPC("    service = \"echo\"", "grpc_service \"xds:///echo\" {\n  route {\n    service = \"echo\"\n  }\n}\n")},
		want:   "a.hcl:6:1: Invalid grpc_service name",
		detail: "what clients dial as xds:///NAME",
	},
	"grpc_service duplicate across documents": {
		docs:   []string{inGRPC("    service = \"echo\"", ""), "\n" + inGRPC("    service = \"echo\"", "")},
		want:   "b.hcl:2:1: Duplicate grpc_service block",
		detail: "already defined at a.hcl:1:1",
	},
	"listener in a proxyless group": {
		docs:   []string{"proxy \"grpc\" {\n  proxyless = true\n  listener \"l\" {\n    port = 80\n  }\n}\n"},
		want:   "a.hcl:3:3: Listener in a proxyless group",
		detail: "Remove the listener blocks or proxyless = true",
	},
	"proxy without listeners mentions proxyless": {
		docs:   []string{"proxy \"grpc\" {\n  proxyless = false\n}\n"},
		want:   "a.hcl:1:1: Proxy without listeners",
		detail: "set proxyless = true for a group of proxyless gRPC clients",
	},
}
