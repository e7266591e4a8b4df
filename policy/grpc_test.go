package policy

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

func TestGRPCServiceResolves(t *testing.T) {
	cfg, diags := loadDocs(false, `
grpc_service "echo" {
  route {
    match {
      header "x-canary" {
        exact = "1"
      }
    }
    service = "echo"
    subset  = "v2"
    timeout = "2s"
    retry {
      attempts = 3
    }
  }
  route {
    service = "echo"
  }
}
grpc_service "alpha" {
  route {
    service = "echo"
  }
}
service "echo" {
  subset "v2" {
    tags = ["v2"]
  }
}
proxy "grpc-*" {
  proxyless = true
}
`)
	if len(diags) > 0 {
		t.Fatalf("diagnostics:\n%s", strings.Join(FormatDiagnostics(diags), "\n"))
	}
	pol := cfg.Policy
	var names []string
	for _, g := range pol.GRPCServices {
		names = append(names, g.Name)
	}
	if !slices.Equal(names, []string{"alpha", "echo"}) {
		t.Fatalf("grpc services = %v, want sorted [alpha echo]", names)
	}
	echo := pol.GRPCService("echo")
	if echo == nil || len(echo.Routes) != 2 {
		t.Fatalf("grpc_service echo = %+v", echo)
	}
	r := echo.Routes[0]
	if r.Timeout != 2*time.Second || len(r.Targets) != 1 || r.Targets[0] != (Target{Service: "echo", Subset: "v2", Weight: 1}) {
		t.Errorf("route 0 = %+v", r)
	}
	if r.Retry == nil || r.Retry.Attempts != 3 || !slices.Equal(r.Retry.On, []string{"unavailable"}) {
		t.Errorf("retry = %+v; want 3 attempts on [unavailable] (gRPC ignores Envoy's HTTP defaults)", r.Retry)
	}
	if len(r.Match.Headers) != 1 || r.Match.Headers[0].Exact != "1" || r.Match.PathPrefix != "/" {
		t.Errorf("match = %+v", r.Match)
	}
	if p := pol.ProxyFor("grpc-frontend"); p == nil || !p.Proxyless || len(p.Listeners) != 0 {
		t.Errorf("proxy for grpc-frontend = %+v, want the proxyless group", p)
	}
	if pol.ExportAllServices {
		t.Error("a policy with grpc_service blocks exports every service; like proxy blocks, it should name them")
	}
	if pol.GRPCService("missing") != nil {
		t.Error("GRPCService found a name that is not declared")
	}
}

// A hash policy gRPC ignores is a warning, not an error: the service may
// serve Envoys too, and gRPC still balances (at random).
func TestGRPCServiceWarnsAboutIgnoredHashPolicy(t *testing.T) {
	cfg, diags := loadDocs(false, inGRPC(`    service = "sessions"`, `service "sessions" {
  lb_policy = "ring_hash"
  hash_policy {
    cookie = "sid"
  }
}
`))
	if cfg == nil || diags.HasErrors() || len(diags) != 1 {
		t.Fatalf("want one warning, got:\n%s", strings.Join(FormatDiagnostics(diags), "\n"))
	}
	d := diags[0]
	if d.Severity != hcl.DiagWarning || firstLine(d) != "a.hcl:3:15: hash_policy ignored by gRPC" || !strings.Contains(d.Detail, "hashes only on headers") {
		t.Fatalf("warning = %s (%s)", firstLine(d), d.Detail)
	}
}

// Service settings gRPC rejects are fine for a service no grpc_service
// routes to: its default API listener is still served, and a gRPC client
// that dials it reports its own error (a NACK the bridge shows).
func TestProxylessGroupKeepsCatalogMirror(t *testing.T) {
	cfg, diags := loadDocs(false, "proxy \"grpc-*\" {\n  proxyless = true\n}\n")
	if len(diags) > 0 {
		t.Fatalf("diagnostics:\n%s", strings.Join(FormatDiagnostics(diags), "\n"))
	}
	if !cfg.Policy.ExportAllServices {
		t.Error("a proxyless group alone stopped exporting every service; it names none")
	}
}

func TestServiceSettingsGRPCRejectsAreAllowedOutsideGRPCService(t *testing.T) {
	if _, diags := loadDocs(false, "service \"echo\" {\n  lb_policy = \"random\"\n}\n"); len(diags) > 0 {
		t.Fatalf("diagnostics:\n%s", strings.Join(FormatDiagnostics(diags), "\n"))
	}
}

// least_request is served to gRPC clients with a fallback (issue 39): a
// warning at the route's service says what each implementation gets.
func TestGRPCServiceLeastRequestFallsBack(t *testing.T) {
	_, diags := loadDocs(false, inGRPC(`    service = "echo"`, "service \"echo\" {\n  lb_policy = \"least_request\"\n}\n"))
	if diags.HasErrors() || len(diags) != 1 {
		t.Fatalf("want one warning:\n%s", strings.Join(FormatDiagnostics(diags), "\n"))
	}
	d := diags[0]
	if firstLine(d) != "a.hcl:3:15: least_request falls back to round_robin for some gRPC clients" ||
		!strings.Contains(d.Detail, "grpc:echo") || !strings.Contains(d.Detail, "grpc-node takes round_robin") || !strings.Contains(d.Detail, "(at a.hcl:6:1)") {
		t.Fatalf("diagnostic = %s (%s)", firstLine(d), d.Detail)
	}
}

// Settings every gRPC client ignores, or applies differently, are
// warnings at the route that sends calls there, once per service.
func TestGRPCServiceWarnsAboutIgnoredClusterSettings(t *testing.T) {
	_, diags := loadDocs(false, `grpc_service "echo" {
  route {
    service = "echo"
  }
  route {
    service = "echo"
  }
}
service "echo" {
  outlier_detection {
    consecutive_5xx = 5
  }
  circuit_breaker {
    max_connections = 10
  }
}
`)
	var got []string
	for _, d := range diags {
		if d.Severity != hcl.DiagWarning {
			t.Errorf("not a warning: %s", firstLine(d))
		}
		got = append(got, firstLine(d))
	}
	want := []string{
		"a.hcl:3:15: outlier_detection works differently in gRPC",
		"a.hcl:3:15: circuit_breaker partly ignored by gRPC",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("diagnostics = %q, want %q", got, want)
	}
	if !strings.Contains(diags[0].Detail, "success rate") || !strings.Contains(diags[1].Detail, "max_requests only") {
		t.Errorf("details: %q; %q", diags[0].Detail, diags[1].Detail)
	}
}

// A service gRPC clients would reject, that no grpc_service names, is a
// warning at its lb_policy once the policy serves gRPC clients at all: its
// default API listener is served to them.
func TestDefaultAPIListenerRejectedByGRPCWarns(t *testing.T) {
	const services = "service \"api\" {\n  lb_policy = \"least_request\"\n}\nservice \"legacy\" {\n  lb_policy = \"random\"\n}\n"
	for name, tc := range map[string]struct {
		extra string
		want  []string
	}{
		"envoys only":     {"", nil},
		"proxyless group": {"proxy \"grpc-*\" {\n  proxyless = true\n}\n", []string{"a.hcl:2:15: least_request falls back to round_robin for some gRPC clients", "a.hcl:5:15: Default API listener gRPC clients reject"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, diags := loadDocs(false, services+tc.extra)
			var got []string
			for _, d := range diags {
				if d.Severity != hcl.DiagWarning {
					t.Errorf("not a warning: %s", firstLine(d))
				}
				got = append(got, firstLine(d))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("diagnostics = %q, want %q", got, tc.want)
			}
			if len(diags) > 0 && (!strings.Contains(diags[0].Detail, "grpc:api") || !strings.Contains(diags[1].Detail, "every gRPC implementation")) {
				t.Errorf("detail = %q", diags[0].Detail)
			}
		})
	}
}
