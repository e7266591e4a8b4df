package model_test

import (
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/routetest"
)

// TestTagRoutesUnderPolicyWildcard: owners let a service's tags into a
// host the policy serves only through a wildcard domain. The tags' own
// virtual host for that host has the exact domain, which Envoy prefers
// over the wildcard, so it must answer the host as the policy did (its
// routes first, its HTTP settings) plus the tag routes; a host the tags
// do not name keeps the wildcard's virtual host.
func TestTagRoutesUnderPolicyWildcard(t *testing.T) {
	src := `
service "legacy" {}
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "wild" {
      domains = ["*.example.com"]
      rate_limit {
        requests = 100
      }
      cors {
        allow_origins = ["https://app.example.com"]
        allow_methods = ["GET"]
      }
      route {
        match {
          path_prefix = "/old"
        }
        service = "legacy"
      }
    }
    tag_routes {
      format = "traefik"
      owners = { "api.example.com" = ["api"] }
    }
  }
}
`
	for _, host := range []string{"api.example.com", "other.example.com"} {
		src += `
route_test "` + host + ` /old: the policy's route" {
  proxy = "edge"
  request {
    host = "` + host + `"
    path = "/old/x"
  }
  expect {
    service    = "legacy"
    rate_limit = "virtual_host"
  }
}
route_test "` + host + ` preflight: the policy's cors" {
  proxy = "edge"
  request {
    host    = "` + host + `"
    path    = "/old"
    method  = "OPTIONS"
    headers = { "origin" = "https://app.example.com", "access-control-request-method" = "GET" }
  }
  expect {
    cors_preflight = true
  }
}
`
	}
	src += `
route_test "the tag route" {
  proxy = "edge"
  request {
    host = "api.example.com"
    path = "/v2/x"
  }
  expect {
    service    = "api"
    rate_limit = "virtual_host"
  }
}
route_test "the tag route is for its host only" {
  proxy = "edge"
  request {
    host = "other.example.com"
    path = "/v2/x"
  }
  expect {
    no_route = true
  }
}
`
	doc, diags := policy.Parse("edge.hcl", []byte(src))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	cfg, diags := policy.Merge(doc)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	tests, diags := routetest.Decode(doc)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	inst := func(id, addr string, tags ...string) []consul.Instance {
		return []consul.Instance{{ID: id, Address: addr, Port: 80, Status: consul.StatusPassing, Tags: tags}}
	}
	cat := consul.NewCatalog([]*consul.Service{
		{Name: "api", Instances: inst("api-1", "10.0.0.1", "traefik.http.routers.api.rule=Host(`api.example.com`) && PathPrefix(`/v2`)")},
		{Name: "legacy", Instances: inst("legacy-1", "10.0.0.2")},
	})
	results, diags := routetest.Run(cfg.Policy, cat, tests)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for _, r := range results {
		for _, f := range r.Failures {
			t.Errorf("%s (virtual host %q, got %s): %s", r.Test.Name, r.VirtualHost, r.Got, f.Message)
		}
	}

	// Names stay what they were: the tags' virtual host is tags-HOST, and
	// its routes are numbered in it, the policy's copies first.
	m, _ := model.Build(cat, cfg.Policy)
	var got []string
	for _, vh := range m.Groups[0].Listeners[0].VirtualHosts {
		var routes []string
		for _, r := range vh.Routes {
			routes = append(routes, r.Name)
		}
		got = append(got, vh.Name+" "+strings.Join(vh.Domains, ",")+": "+strings.Join(routes, " "))
	}
	want := "wild *.example.com: wild/0 | tags-api-example-com api.example.com: tags-api-example-com/0 tags-api-example-com/1"
	if g := strings.Join(got, " | "); g != want {
		t.Errorf("virtual hosts\n%s\nwant\n%s", g, want)
	}
}
