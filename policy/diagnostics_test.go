package policy

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

// inRoute wraps route attributes and blocks in a proxy, listener and
// virtual_host so that body starts on line 6, column 1 of the document;
// extra (e.g. service blocks) follows the proxy block.
func inRoute(body, extra string) string {
	return `proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "shop" {
      route {
` + body + `
      }
    }
  }
}
` + extra
}

// inListener wraps listener attributes and blocks so that body starts on
// line 3 of the document.
func inListener(body string) string {
	return `proxy "edge" {
  listener "l" {
` + body + `
  }
}
`
}

// inGRPC wraps route attributes and blocks in a grpc_service "echo" so
// that body starts on line 3, column 1; extra follows the block.
func inGRPC(body, extra string) string {
	return `grpc_service "echo" {
  route {
` + body + `
  }
}
` + extra
}

const apiWithV2 = `
service "api" {
  subset "v2" {
    tags = ["v2"]
  }
}
`

// loadDocs runs documents named a.hcl, b.hcl, ... (or KV keys
// xds-bridge/policy/a, ... when kv is set) through Parse (or ParseKV) and,
// when they all parse, Merge: what `validate` and a reload do.
func loadDocs(kv bool, srcs ...string) (*Config, hcl.Diagnostics) {
	var (
		docs  []*Document
		diags hcl.Diagnostics
	)
	for i, src := range srcs {
		name := fmt.Sprintf("%c.hcl", 'a'+i)
		parse := Parse
		if kv {
			name, parse = fmt.Sprintf("xds-bridge/policy/%c", 'a'+i), ParseKV
		}
		d, ds := parse(name, []byte(src))
		diags = append(diags, ds...)
		if d != nil {
			docs = append(docs, d)
		}
	}
	if diags.HasErrors() {
		return nil, diags
	}
	cfg, ds := Merge(docs...)
	return cfg, append(diags, ds...)
}

func firstLine(d *hcl.Diagnostic) string {
	if d.Subject == nil {
		return "<no subject>: " + d.Summary
	}
	return fmt.Sprintf("%s:%d:%d: %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, d.Summary)
}

// diagCase is one policy with one expected first diagnostic.
type diagCase struct {
	docs []string
	kv   bool
	// want is the first diagnostic as "file:line:col: Summary".
	want string
	// detail is a phrase the first diagnostic's Detail must contain:
	// what to do about it, or where the conflicting definition is.
	detail string
}

// TestDiagnostics checks the first diagnostic of each broken policy: its
// position, summary and advice. The cases are split by topic over
// diagnosticCases (syntax, services, proxies) and routeDiagnosticCases.
func TestDiagnostics(t *testing.T) {
	tests := map[string]diagCase{}
	for _, cases := range []map[string]diagCase{diagnosticCases, routeDiagnosticCases} {
		for name, tc := range cases {
			if _, dup := tests[name]; dup {
				t.Fatalf("case %q defined twice", name)
			}
			tests[name] = tc
		}
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, diags := loadDocs(tc.kv, tc.docs...)
			if !diags.HasErrors() {
				t.Fatalf("no error; policy: %+v", cfg.Policy)
			}
			for _, d := range diags {
				if d.Subject == nil || d.Subject.Filename == "" || d.Subject.Start.Line < 1 {
					t.Errorf("diagnostic without a usable position: %s: %s", d.Summary, d.Detail)
				}
			}
			first := diags[0]
			if got := firstLine(first); got != tc.want {
				t.Errorf("first diagnostic = %q\n                 want %q\nall:\n  %s", got, tc.want, strings.Join(FormatDiagnostics(diags), "\n  "))
			}
			if first.Severity != hcl.DiagError {
				t.Errorf("first diagnostic is not an error: %v", first.Severity)
			}
			if !strings.Contains(first.Detail, tc.detail) {
				t.Errorf("detail = %q\nwant it to contain %q", first.Detail, tc.detail)
			}
		})
	}
}

// TestDiagnosticsAllReported checks that one document with several
// independent problems gets a diagnostic for each (one `validate` run shows
// everything to fix), and nothing else.
func TestDiagnosticsAllReported(t *testing.T) {
	_, diags := loadDocs(false, `service "api" {
  lb_policy       = "fastest"
  connect_timeout = "1"
  subset "v2" {
  }
}
proxy "edge" {
  listener "http" {
    port = 0
    virtual_host "v" {
      route {
        service = "api"
        subset  = "v3"
      }
    }
  }
}
`)
	var got []string
	for _, d := range diags {
		got = append(got, firstLine(d))
	}
	slices.Sort(got)
	want := []string{
		"a.hcl:13:19: Unknown subset",
		"a.hcl:2:21: Invalid lb_policy",
		"a.hcl:3:21: Invalid duration",
		"a.hcl:4:3: Empty subset",
		"a.hcl:9:12: Invalid port",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("diagnostics:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestDiagnosticsValid checks that documents exercising every block parse
// without diagnostics, so the failure cases above fail for their one reason.
func TestDiagnosticsValid(t *testing.T) {
	for name, src := range map[string]string{
		"route with everything": inRoute(`        match {
          path_regex = "^/users/[0-9]+$"
          method     = "GET"
          header "x-canary" {
            present = true
          }
          query "debug" {
            exact = "1"
          }
        }
        split {
          service = "api"
          weight  = 90
        }
        split {
          service = "api"
          subset  = "v2"
          weight  = 10
        }
        timeout = "0s"
        retry {
          attempts = 3
          on       = ["5xx", "connect-failure"]
        }
        rewrite {
          regex        = "^/users/(.*)$"
          substitution = "/u/\\1"
        }
        request_headers {
          set    = { "x-env" = "prod" }
          remove = ["x-debug"]
        }
        mirror {
          service = "api"
          subset  = "v2"
          percent = 5
        }
        fault {
          delay {
            duration = "100ms"
            percent  = 1
          }
        }`, apiWithV2),
		"tcp listener with split": inListener(`    port     = 5432
    protocol = "tcp"
    split {
      service = "db"
      weight  = 1
    }
    split {
      service = "db-replica"
      weight  = 1
    }`),
		"export_all_services agreeing across documents": "export_all_services = true\n",
		"grpc_service with everything gRPC supports": inGRPC(`    match {
      path_regex     = "^/echo[.]Echo/(Say|Shout)$"
      case_sensitive = false
      header "x-canary" {
        exact = "1"
      }
      header "x-debug" {
        present = true
        invert  = true
      }
    }
    split {
      service = "api"
      weight  = 80
    }
    split {
      service = "api"
      subset  = "v2"
      weight  = 20
    }
    timeout = "3s"
    retry {
      attempts = 2
      on       = ["unavailable", "cancelled", "deadline-exceeded", "internal", "resource-exhausted"]
    }
    fault {
      abort {
        status  = 503
        percent = 0.5
      }
    }`, apiWithV2+"proxy \"grpc-*\" {\n  proxyless = true\n}\n"),
	} {
		t.Run(name, func(t *testing.T) {
			if _, diags := loadDocs(false, src, "export_all_services = true\n"); len(diags) > 0 {
				t.Fatalf("unexpected diagnostics:\n  %s", strings.Join(FormatDiagnostics(diags), "\n  "))
			}
		})
	}
}

// TestLoadFilesDiagnostics covers the file-reading front of `validate`:
// an unreadable file is named in its diagnostic, and problems across files
// point into the right one.
func TestLoadFilesDiagnostics(t *testing.T) {
	dir := t.TempDir()
	a, b := dir+"/a.hcl", dir+"/b.hcl"
	if err := os.WriteFile(a, []byte("service \"api\" {\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("\nservice \"api\" {\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	_, _, diags := LoadFiles(a, dir+"/missing.hcl")
	if len(diags) != 1 || diags[0].Summary != "Cannot read configuration file" || diags[0].Subject == nil || diags[0].Subject.Filename != dir+"/missing.hcl" {
		t.Fatalf("missing file: %s", FormatDiagnostics(diags))
	}

	cfg, sources, diags := LoadFiles(a, b)
	if cfg != nil || len(sources) != 2 {
		t.Fatalf("cfg = %v, %d sources", cfg, len(sources))
	}
	want := b + ":2:1: Duplicate service block: service \"api\" is already defined at " + a + ":1:1;"
	if len(diags) != 1 || !strings.HasPrefix(FormatDiagnostics(diags)[0], want) {
		t.Fatalf("duplicate across files:\n%s\nwant prefix\n%s", strings.Join(FormatDiagnostics(diags), "\n"), want)
	}

	if _, _, diags := LoadFiles(); !diags.HasErrors() || !strings.Contains(diags[0].Detail, "-config FILE") {
		t.Fatalf("no files: %s", FormatDiagnostics(diags))
	}
}

var diagnosticCases = map[string]diagCase{
	// --- HCL syntax and gohcl decoding ---
	"syntax error": {
		docs:   []string{"service \"api\" {\n  lb_policy = \n}\n"},
		want:   "a.hcl:2:15: Invalid expression",
		detail: "Expected the start of an expression",
	},
	"unknown block type": {
		docs:   []string{"\nservce \"api\" {\n}\n"},
		want:   "a.hcl:2:1: Unsupported block type",
		detail: `Did you mean "service"?`,
	},
	"unknown attribute": {
		docs:   []string{"service \"api\" {\n  conect_timeout = \"1s\"\n}\n"},
		want:   "a.hcl:2:3: Unsupported argument",
		detail: `Did you mean "connect_timeout"?`,
	},
	"unknown block in route": {
		docs:   []string{inRoute("        service = \"web\"\n        rewite {\n        }", "")},
		want:   "a.hcl:7:9: Unsupported block type",
		detail: `Did you mean "rewrite"?`,
	},
	"string where number expected": {
		docs:   []string{inListener(`    port = "http"`)},
		want:   "a.hcl:3:13: Unsuitable value type",
		detail: "a number is required",
	},
	"missing required port": {
		docs:   []string{inListener(`    protocol = "tcp"`)},
		want:   "a.hcl:2:16: Missing required argument",
		detail: `The argument "port" is required`,
	},
	"absurdly large number": {
		docs:   []string{"service \"api\" {\n  lb_policy = 1e1000000000\n}\n"},
		want:   "a.hcl:2:15: Number out of range",
		detail: "write a value within the range of a 64-bit float",
	},
	"template variable where a literal is expected": {
		docs:   []string{"service \"api\" {\n  connect_timeout = \"${t}s\"\n}\n"},
		want:   "a.hcl:2:24: Variables not allowed",
		detail: "Variables may not be used here",
	},

	// --- service blocks ---
	"bad duration": {
		docs:   []string{"service \"api\" {\n  connect_timeout = \"5\"\n}\n"},
		want:   "a.hcl:2:21: Invalid duration",
		detail: `use Go syntax, e.g. "1s" or "250ms"`,
	},
	"duration given as a number": {
		docs:   []string{"service \"api\" {\n  connect_timeout = 5\n}\n"},
		want:   "a.hcl:2:21: Invalid duration",
		detail: `use Go syntax, e.g. "1s" or "250ms"`,
	},
	"negative duration": {
		docs:   []string{"service \"api\" {\n  connect_timeout = \"-1s\"\n}\n"},
		want:   "a.hcl:2:21: Invalid duration",
		detail: `"-1s" must be positive`,
	},
	"zero outlier interval": {
		docs:   []string{"service \"api\" {\n  outlier_detection {\n    interval = \"0s\"\n  }\n}\n"},
		want:   "a.hcl:3:16: Invalid duration",
		detail: "must be positive",
	},
	"negative circuit breaker threshold": {
		docs:   []string{"service \"api\" {\n  circuit_breaker {\n    max_connections = -1\n  }\n}\n"},
		want:   "a.hcl:3:23: Invalid max_connections",
		detail: "must be between 0 and",
	},
	"outlier ejection percent above 100": {
		docs:   []string{"service \"api\" {\n  outlier_detection {\n    max_ejection_percent = 101\n  }\n}\n"},
		want:   "a.hcl:3:28: Invalid max_ejection_percent",
		detail: "not a percentage between 0 and 100",
	},
	"zero health check threshold": {
		docs:   []string{"service \"api\" {\n  health_check {\n    healthy_threshold = 0\n  }\n}\n"},
		want:   "a.hcl:3:25: Invalid healthy_threshold",
		detail: "must be a positive integer",
	},
	"health check path without slash": {
		docs:   []string{"service \"api\" {\n  health_check {\n    path = \"healthz\"\n  }\n}\n"},
		want:   "a.hcl:3:12: Invalid health check path",
		detail: `must start with "/"`,
	},
	"invalid lb_policy": {
		docs:   []string{"service \"api\" {\n  lb_policy = \"maglev\"\n}\n"},
		want:   "a.hcl:2:15: Invalid lb_policy",
		detail: `is not one of "round_robin", "least_request", "ring_hash", "random"`,
	},
	"hash_policy without ring_hash": {
		docs:   []string{"service \"api\" {\n  lb_policy = \"least_request\"\n  hash_policy {\n    header = \"x-user\"\n  }\n}\n"},
		want:   "a.hcl:3:3: hash_policy without ring_hash",
		detail: `Set lb_policy = "ring_hash" or remove the hash_policy`,
	},
	"hash_policy with two keys": {
		docs:   []string{"service \"api\" {\n  lb_policy = \"ring_hash\"\n  hash_policy {\n    header = \"x-user\"\n    cookie = \"session\"\n  }\n}\n"},
		want:   "a.hcl:3:3: Invalid hash_policy",
		detail: "needs exactly one of header, cookie or source_ip = true; this one has 2",
	},
	"service name with a dot": {
		docs:   []string{"\nservice \"api.v2\" {\n}\n"},
		want:   "a.hcl:2:1: Invalid service name",
		detail: "Use consul_service",
	},
	"duplicate service across documents": {
		docs:   []string{"service \"api\" {\n}\n", "\n\nservice \"api\" {\n  lb_policy = \"random\"\n}\n"},
		want:   "b.hcl:3:1: Duplicate service block",
		detail: "already defined at a.hcl:1:1; each service may be configured once",
	},
	"duplicate subset": {
		docs:   []string{"service \"api\" {\n  subset \"v2\" {\n    tags = [\"v2\"]\n  }\n  subset \"v2\" {\n    tags = [\"canary\"]\n  }\n}\n"},
		want:   "a.hcl:5:3: Duplicate subset",
		detail: "already defined at a.hcl:2:3; rename or remove one",
	},
	"empty subset": {
		docs:   []string{"service \"api\" {\n  subset \"all\" {\n  }\n}\n"},
		want:   "a.hcl:2:3: Empty subset",
		detail: "give it tags or meta to select by",
	},
	"subset name with a dot": {
		docs:   []string{"service \"api\" {\n  subset \"v2.1\" {\n    tags = [\"v2\"]\n  }\n}\n"},
		want:   "a.hcl:2:3: Invalid subset name",
		detail: "use letters, digits, '-' and '_' only",
	},
	"incomplete client certificate": {
		docs:   []string{"service \"api\" {\n  tls {\n    cert_file = \"/etc/c.pem\"\n  }\n}\n"},
		want:   "a.hcl:2:3: Incomplete client certificate",
		detail: "needs both cert_file and key_file",
	},
	"failover with empty list": {
		docs:   []string{"service \"api\" {\n  failover {\n    datacenters = []\n  }\n}\n"},
		want:   "a.hcl:3:19: Empty failover",
		detail: `name a service or subset, or remove the failover block`,
	},
	"failover datacenter repeated": {
		docs:   []string{"service \"api\" {\n  failover {\n    datacenters = [\"dc2\", \"dc3\", \"dc2\"]\n  }\n}\n"},
		want:   "a.hcl:3:34: Invalid failover datacenter",
		detail: "list each other datacenter once",
	},
	"failover mixing targets and names": {
		docs:   []string{"service \"api\" {\n  failover {\n    service = \"b\"\n    target {\n      service = \"c\"\n    }\n  }\n}\n"},
		want:   "a.hcl:2:3: Conflicting failover",
		detail: "move them into target blocks",
	},
	"failover target that is the service itself": {
		docs:   []string{"service \"api\" {\n  subset \"v1\" {\n    tags = [\"v1\"]\n    failover {\n      target {\n        subset = \"v1\"\n      }\n    }\n  }\n}\n"},
		want:   "a.hcl:5:7: Invalid failover target",
		detail: "the failing one itself",
	},

	// --- proxies and listeners ---
	"duplicate proxy across documents": {
		docs:   []string{inListener("    port = 80\n    service = \"web\"\n    protocol = \"tcp\""), "\nproxy \"edge\" {\n}\n"},
		want:   "b.hcl:2:1: Duplicate proxy block",
		detail: "already defined at a.hcl:1:1",
	},
	"proxy with no listener": {
		docs:   []string{"proxy \"edge\" {\n}\n"},
		want:   "a.hcl:1:1: Proxy without listeners",
		detail: "add a listener block",
	},
	"bad proxy glob": {
		docs:   []string{"proxy \"edge-[\" {\n}\n"},
		want:   "a.hcl:1:1: Invalid proxy group",
		detail: "path.Match syntax",
	},
	"duplicate listener": {
		docs: []string{`proxy "edge" {
  listener "db" {
    port     = 5432
    protocol = "tcp"
    service  = "db"
  }
  listener "db" {
    port     = 5433
    protocol = "tcp"
    service  = "db"
  }
}
`},
		want:   "a.hcl:7:3: Duplicate listener",
		detail: "already defined at a.hcl:2:3; listener names must be unique",
	},
	"duplicate port in a group": {
		docs: []string{`proxy "edge" {
  listener "db" {
    port     = 5432
    protocol = "tcp"
    service  = "db"
  }
  listener "replica" {
    port     = 5432
    protocol = "tcp"
    service  = "db-replica"
  }
}
`},
		want:   "a.hcl:8:16: Duplicate port",
		detail: "at a.hcl:2:3; give each listener its own port",
	},
	"port out of range": {
		docs:   []string{inListener("    port     = 70000\n    protocol = \"tcp\"\n    service  = \"db\"")},
		want:   "a.hcl:3:16: Invalid port",
		detail: "not between 1 and 65535",
	},
	"listener address is a host name": {
		docs:   []string{inListener("    port     = 5432\n    address  = \"localhost\"\n    protocol = \"tcp\"\n    service  = \"db\"")},
		want:   "a.hcl:4:16: Invalid listener address",
		detail: `use a literal address such as "0.0.0.0"`,
	},
	"bad protocol": {
		docs:   []string{inListener("    port     = 53\n    protocol = \"udp\"\n    service  = \"dns\"")},
		want:   "a.hcl:4:16: Invalid protocol",
		detail: `is not one of "http", "tcp"`,
	},
	"listener name with a dot": {
		docs:   []string{"proxy \"edge\" {\n  listener \"a.b\" {\n    port = 80\n    protocol = \"tcp\"\n    service = \"web\"\n  }\n}\n"},
		want:   "a.hcl:2:3: Invalid listener name",
		detail: `names may not contain "."`,
	},
	"http listener with no virtual host": {
		docs:   []string{inListener("    port = 8080")},
		want:   "a.hcl:2:3: Listener without routes",
		detail: "add a virtual_host block with a route",
	},
	"http listener with service": {
		docs:   []string{inListener("    port = 8080\n    service = \"web\"")},
		want:   "a.hcl:4:15: service on an http listener",
		detail: "service and split apply to tcp listeners",
	},
	"http listener with idle_timeout": {
		docs:   []string{inListener("    port = 8080\n    idle_timeout = \"1m\"\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
		want:   "a.hcl:4:20: idle_timeout on an http listener",
		detail: "set idle_timeout on routes",
	},
	"tcp listener with virtual_host": {
		docs:   []string{inListener("    port = 5432\n    protocol = \"tcp\"\n    service = \"db\"\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }")},
		want:   "a.hcl:6:5: virtual_host on a tcp listener",
		detail: `Use protocol = "http"`,
	},
	"tcp listener with no target": {
		docs:   []string{inListener("    port = 5432\n    protocol = \"tcp\"")},
		want:   "a.hcl:2:3: Listener needs exactly one target",
		detail: `use exactly one of service = "..." or split blocks`,
	},
	"unknown subset on a tcp listener": {
		docs:   []string{inListener("    port = 5432\n    protocol = \"tcp\"\n    service = \"api\"\n    subset = \"v3\"") + apiWithV2},
		want:   "a.hcl:6:14: Unknown subset",
		detail: `declared subsets: "v2"`,
	},

	// --- virtual hosts ---
	"virtual_host with no routes": {
		docs:   []string{inListener("    port = 8080\n    virtual_host \"shop\" {\n      domains = [\"shop.example.com\"]\n    }")},
		want:   "a.hcl:4:5: virtual_host without routes",
		detail: "add a route block",
	},
	"duplicate domain across virtual hosts": {
		docs: []string{inListener(`    port = 8080
    virtual_host "a" {
      domains = ["a.example.com", "shop.example.com"]
      route {
        service = "a"
      }
    }
    virtual_host "b" {
      domains = ["b.example.com", "Shop.Example.com"]
      route {
        service = "b"
      }
    }`)},
		want:   "a.hcl:11:35: Duplicate domain",
		detail: `also served by virtual_host "a" of listener "l" of proxy "edge" at a.hcl:5:35; Envoy requires each domain once per listener, so remove it`,
	},
	"two catch-all virtual hosts": {
		docs: []string{inListener(`    port = 8080
    virtual_host "a" {
      route {
        service = "a"
      }
    }
    virtual_host "b" {
      route {
        service = "b"
      }
    }`)},
		want:   "a.hcl:9:5: Duplicate domain",
		detail: `domain "*" is also served by virtual_host "a"`,
	},
	"bad wildcard domain": {
		docs:   []string{inListener("    port = 8080\n    virtual_host \"v\" {\n      domains = [\"api.*.example.com\"]\n      route {\n        service = \"web\"\n      }\n    }")},
		want:   "a.hcl:5:18: Invalid domain",
		detail: `a wildcard may only be a prefix ("*.example.com")`,
	},
}
