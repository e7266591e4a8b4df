package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

const chainSrc = `
service "api" {
  subset "v1" {
    tags = ["v1"]
  }
  subset "v2" {
    tags = ["v2"]
  }
}
chain "api" {
  route {
    match {
      header "x-canary" {
        exact = "1"
      }
    }
    service = "api"
    subset  = "v2"
    timeout = "2s"
  }
  route {
    match {
      path_prefix = "/other/"
    }
    service = "api"
    subset  = "v2"
  }
  route {
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
}
`

// routeSummary is a route as "match -> targets timeout".
func routeSummary(r *Route) string {
	var hs []string
	for _, h := range r.Match.Headers {
		hs = append(hs, h.Name+"="+h.Exact)
	}
	var ts []string
	for _, t := range r.Targets {
		ts = append(ts, fmt.Sprintf("%s.%s=%d", t.Service, t.Subset, t.Weight))
	}
	return fmt.Sprintf("%s%s[%s] -> %s %s", r.Match.PathPrefix, r.Match.Path, strings.Join(hs, ","), strings.Join(ts, ","), r.Timeout)
}

// TestEdgeRoutesFollowTheChain: a proxy listener route to a service with a
// chain becomes the chain's routes, joined with its own match: the
// router's header route (its timeout filling the route's), a router route
// whose path does not nest is left out (said in the warning), then the
// 90/10 split. chain = false, a subset target and a split route (the
// chain's split only, weights multiplied) behave as documented.
func TestEdgeRoutesFollowTheChain(t *testing.T) {
	src := chainSrc + `
service "web" {}
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "shop" {
      domains = ["*"]
      route {
        match {
          path_prefix = "/api/"
        }
        service = "api"
      }
      route {
        match {
          path_prefix = "/raw/"
        }
        service = "api"
        chain   = false
      }
      route {
        match {
          path_prefix = "/v2/"
        }
        service = "api"
        subset  = "v2"
      }
      route {
        split {
          service = "api"
          weight  = 50
        }
        split {
          service = "web"
          weight  = 50
        }
      }
    }
  }
}
`
	cfg, diags := loadDocs(false, src)
	if diags.HasErrors() {
		t.Fatal(FormatDiagnostics(diags))
	}
	var got []string
	for _, r := range cfg.Policy.Proxies[0].Listeners[0].VirtualHosts[0].Routes {
		got = append(got, routeSummary(r))
	}
	want := []string{
		"/api/[x-canary=1] -> api.v2=1 2s",
		"/api/[] -> api.v1=90,api.v2=10 0s",
		"/raw/[] -> api.=1 0s",
		"/v2/[] -> api.v2=1 0s",
		"/[] -> api.v1=9,api.v2=1,web.=10 0s",
	}
	if !slices.Equal(got, want) {
		t.Errorf("routes:\n got %q\nwant %q", got, want)
	}
	var warnings []string
	for _, d := range FormatDiagnostics(diags) {
		if strings.Contains(d, "Route follows the discovery chain") {
			warnings = append(warnings, d)
		}
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "router route 1") || !strings.Contains(warnings[0], "chain = false") {
		t.Errorf("warnings = %q; want one per chained route, the first naming router route 1 (left out) and the opt-out", warnings)
	}

	// Without the chain block the same route is left alone.
	cfg, diags = loadDocs(false, strings.Replace(src, `chain "api"`, `mesh_routes "api"`, 1))
	if r := cfg.Policy.Proxies[0].Listeners[0].VirtualHosts[0].Routes; len(r) != 4 || routeSummary(r[0]) != "/api/[] -> api.=1 0s" {
		t.Errorf("without a chain: %d routes, first %s; diagnostics %v", len(r), routeSummary(r[0]), FormatDiagnostics(diags))
	}
}

// TestChainNeedsACatchAll: a chain's last route has no match.
func TestChainNeedsACatchAll(t *testing.T) {
	_, diags := loadDocs(false, "chain \"api\" {\n  route {\n    match {\n      path = \"/x\"\n    }\n    service = \"api\"\n  }\n}\n")
	if got := FormatDiagnostics(diags); len(got) == 0 || !strings.Contains(got[0], "a.hcl:1:1: Chain without a catch-all") {
		t.Errorf("diagnostics = %q", got)
	}
}
