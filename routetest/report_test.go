package routetest_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/routetest"
)

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestReport checks the output format: a line per test, a line per failed
// expectation at its file:line:col with the matched route, a summary.
func TestReport(t *testing.T) {
	src := `route_test "canary" {
  proxy    = "edge"
  listener = "http"
  request {
    host    = "shop.example.com"
    path    = "/api/users"
    headers = { "x-canary" = "1" }
  }
  expect {
    service = "api"
    subset  = "v2"
  }
}

route_test "wrong split" {
  proxy    = "edge"
  listener = "http"
  request {
    host = "shop.example.com"
    path = "/api/users"
  }
  expect {
    split   = { "api.v1" = 50, "api.v2" = 50 }
    timeout = "15s"
  }
}

route_test "nowhere" {
  proxy    = "edge"
  listener = "admin"
  request {
    host = "shop.example.com"
  }
  expect {
    service = "web"
  }
}
`
	var out bytes.Buffer
	failed := routetest.Report(&out, run(t, src, nil))
	want := fmt.Sprintf(`PASS tests.hcl:1:1: canary -> route %[1]s in virtual host "shop": cluster "api.v2"
FAIL tests.hcl:15:1: wrong split -> route %[2]s in virtual host "shop": split {"api.v1" = 90, "api.v2" = 10}
  tests.hcl:23:5: split: expected {"api.v1" = 50, "api.v2" = 50}, got split {"api.v1" = 90, "api.v2" = 10}; matched route %[2]s
FAIL tests.hcl:28:1: nowhere -> no route (404) in virtual host "admin"
  tests.hcl:35:5: service: expected cluster "web", got no route (404)
1 passed, 2 failed
`, routeAt(t, "canary"), routeAt(t, "split"))
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
	if failed != 2 {
		t.Errorf("failed = %d, want 2", failed)
	}
}

// TestDecodeErrors checks the diagnostics of malformed route tests.
func TestDecodeErrors(t *testing.T) {
	tests := map[string]struct {
		src  string
		want []string
	}{
		"missing blocks": {
			src:  "route_test \"a\" {\n  proxy = \"edge\"\n}\n",
			want: []string{"t.hcl:1:1: Missing request block", "t.hcl:1:1: Missing expect block"},
		},
		"missing proxy": {
			src:  "route_test \"a\" {\n  request {\n    host = \"x\"\n  }\n  expect {\n    no_route = true\n  }\n}\n",
			want: []string{"t.hcl:1:16: Missing required argument"},
		},
		"unknown expectation": {
			src:  "route_test \"a\" {\n  proxy = \"edge\"\n  request {\n    host = \"x\"\n  }\n  expect {\n    cluster = \"web\"\n  }\n}\n",
			want: []string{"t.hcl:7:5: Unsupported argument"},
		},
		"bad request": {
			src:  "route_test \"a\" {\n  proxy = \"edge\"\n  request {\n    host = \"\"\n    path = \"x\"\n    scheme = \"ftp\"\n    headers = { \":path\" = \"/\" }\n  }\n  expect {\n    no_route = true\n  }\n}\n",
			want: []string{"t.hcl:4:5: Empty host", "t.hcl:5:5: Invalid path", "t.hcl:6:5: Invalid scheme", "t.hcl:7:5: Invalid header name"},
		},
		"contradictions": {
			src: "route_test \"a\" {\n  proxy = \"edge\"\n  request {\n    host = \"x\"\n  }\n  expect {\n    subset = \"v2\"\n    no_route = true\n    status = 700\n    split = {}\n    timeout = \"soon\"\n    retries = -1\n  }\n}\n",
			want: []string{
				"t.hcl:7:5: Subset without service", "t.hcl:10:5: Empty split", "t.hcl:9:5: Invalid status", "t.hcl:11:5: Invalid timeout", "t.hcl:12:5: Invalid count",
				"t.hcl:7:5: Expectation contradicts no_route", "t.hcl:10:5: Expectation contradicts no_route", "t.hcl:11:5: Expectation contradicts no_route",
				"t.hcl:12:5: Expectation contradicts no_route", "t.hcl:9:5: Expectation contradicts no_route",
			},
		},
		"service and split": {
			src:  "route_test \"a\" {\n  proxy = \"edge\"\n  request {\n    host = \"x\"\n  }\n  expect {\n    service = \"a\"\n    split = { \"a\" = 1 }\n  }\n}\n",
			want: []string{"t.hcl:8:5: Both service and split"},
		},
		"empty expect": {
			src:  "route_test \"a\" {\n  proxy = \"edge\"\n  request {\n    host = \"x\"\n  }\n  expect {\n  }\n}\n",
			want: []string{"t.hcl:6:3: Empty expect block"},
		},
		"duplicate name": {
			src:  "route_test \"a\" {\n  proxy = \"edge\"\n  request {\n    host = \"x\"\n  }\n  expect {\n    no_route = true\n  }\n}\nroute_test \"a\" {\n  proxy = \"edge\"\n}\n",
			want: []string{"t.hcl:10:1: Duplicate route_test: A route_test named \"a\" is already defined at t.hcl:1:1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, diags := routetest.Decode(parse(t, "t.hcl", tc.src))
			got := policy.FormatDiagnostics(diags)
			if len(got) != len(tc.want) {
				t.Fatalf("diagnostics:\n  %s\nwant %d:\n  %s", strings.Join(got, "\n  "), len(tc.want), strings.Join(tc.want, "\n  "))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("diagnostic %d = %q, want prefix %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestCatalogNeeded: endpoint expectations without a catalog are an error
// before anything runs, not a failed test.
func TestCatalogNeeded(t *testing.T) {
	pol := parse(t, "policy.hcl", testPolicy)
	doc := parse(t, "t.hcl", "route_test \"a\" {\n  proxy = \"edge\"\n  listener = \"http\"\n  request {\n    host = \"shop.example.com\"\n  }\n  expect {\n    healthy_endpoints = 2\n  }\n}\n")
	cfg, _ := policy.Merge(pol, doc)
	tests, diags := routetest.Decode(doc)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	results, diags := routetest.Run(cfg.Policy, nil, tests)
	got := policy.FormatDiagnostics(diags)
	if results != nil || len(got) != 1 || !strings.HasPrefix(got[0], "t.hcl:8:5: Catalog fixture needed") {
		t.Fatalf("results %v, diagnostics %q", results, got)
	}
	if results, diags := routetest.Run(cfg.Policy, catalog(t), tests); diags.HasErrors() || !results[0].Passed() {
		t.Fatalf("with a catalog: %v %+v", diags, results[0].Failures)
	}
}

// TestPolicyStillRejectsUnknownBlocks: route_test is accepted, nothing else
// new is.
func TestPolicyStillRejectsUnknownBlocks(t *testing.T) {
	_, diags := policy.Parse("t.hcl", []byte("route_tests {\n}\n"))
	if !diags.HasErrors() || diags[0].Subject.Start.Line != 1 || diags[0].Severity != hcl.DiagError {
		t.Fatalf("route_tests block accepted: %v", diags)
	}
}
