package model

import (
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
)

// TestTagRoutesJoinPolicyHostInAnyCase: tags that owners lets into a host
// the policy serves join the policy's virtual host even when the two
// spell the host in different cases, so the listener never repeats a
// domain (Envoy refuses a route configuration that does, compared
// case-insensitively); listeners get their own owners.
func TestTagRoutesJoinPolicyHostInAnyCase(t *testing.T) {
	pol := meshPolicy(t, `
proxy "edge" {
  listener "open" {
    port = 8080
    virtual_host "shop" {
      domains = ["Shop.example.com"]
      route {
        service = "web"
      }
    }
    tag_routes {
      format = "fabio"
      owners = { "shop.example.com" = ["api"] }
    }
  }
  listener "closed" {
    port = 8081
    virtual_host "shop" {
      domains = ["Shop.example.com"]
      route {
        service = "web"
      }
    }
    tag_routes {
      format = "fabio"
    }
  }
}
`)
	cat := &consul.Catalog{Services: []*consul.Service{
		{Name: "api", Instances: []consul.Instance{{ID: "api-1", Address: "10.0.0.1", Port: 80, Status: consul.StatusPassing, Tags: []string{"urlprefix-SHOP.example.com/api"}}}},
		{Name: "web", Instances: []consul.Instance{{ID: "web-1", Address: "10.0.0.2", Port: 80, Status: consul.StatusPassing}}},
	}}
	m, warnings := Build(cat, pol)
	routes := map[string][]string{}
	for _, g := range m.Groups {
		for _, l := range g.Listeners {
			seen := map[string]bool{}
			for _, vh := range l.VirtualHosts {
				for _, d := range vh.Domains {
					if seen[strings.ToLower(d)] {
						t.Errorf("%s repeats domain %q", l.Name, d)
					}
					seen[strings.ToLower(d)] = true
				}
				for _, r := range vh.Routes {
					routes[l.Name] = append(routes[l.Name], vh.Name+" "+r.Match.PathPrefix+" "+r.Clusters[0].Name)
				}
			}
		}
	}
	if got := strings.Join(routes["edge.open"], ", "); got != "shop / web, shop /api api" {
		t.Errorf("edge.open routes %q, want the tag route after the policy's, in its virtual host", got)
	}
	if got := strings.Join(routes["edge.closed"], ", "); got != "shop / web" {
		t.Errorf("edge.closed routes %q, want the policy's only", got)
	}
	if !strings.Contains(strings.Join(warnings, "\n"), `host "shop.example.com" is served by the policy's own virtual host (domain "Shop.example.com")`) {
		t.Errorf("no warning for the refused tag on edge.closed: %q", warnings)
	}
}
