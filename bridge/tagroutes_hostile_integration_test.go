package bridge_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

const hostilePolicy = `
proxy "edge" {
  listener "traefik" {
    port = 8080
    tag_routes {
      format = "traefik"
    }
  }
  listener "fabio" {
    port = 8081
    virtual_host "admin" {
      domains = ["Admin.example.com"]
      route {
        direct_response {
          status = 403
        }
      }
    }
    tag_routes {
      format = "fabio"
      owners = { "canary.example.com" = ["api", "api-v2"] }
    }
  }
}
`

// envoyDomainsOK applies Envoy's route configuration rule: a domain
// appears once across the virtual hosts, compared case-insensitively
// ("Only unique values for domains are permitted"); and go-control-plane's
// ValidateAll.
func envoyDomainsOK(rc *routev3.RouteConfiguration) string {
	if err := rc.ValidateAll(); err != nil {
		return err.Error()
	}
	seen := map[string]string{}
	for _, vh := range rc.GetVirtualHosts() {
		for _, d := range vh.GetDomains() {
			if prev, ok := seen[strings.ToLower(d)]; ok {
				return "Only unique values for domains are permitted. Duplicate entry of domain " + d + " (virtual hosts " + prev + " and " + vh.GetName() + ")"
			}
			seen[strings.ToLower(d)] = vh.GetName()
		}
	}
	return ""
}

// routesByDomain is each virtual host's routes as "path -> target".
func routesByDomain(rc *routev3.RouteConfiguration) map[string][]string {
	out := map[string][]string{}
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			s := r.GetMatch().GetPrefix() + " ->"
			switch {
			case r.GetDirectResponse() != nil:
				s += " direct"
			case r.GetRedirect() != nil:
				s += " redirect " + r.GetRedirect().GetHostRedirect()
			case r.GetRoute().GetCluster() != "":
				s += " " + r.GetRoute().GetCluster()
			default:
				for _, c := range r.GetRoute().GetWeightedClusters().GetClusters() {
					s += " " + c.GetName()
				}
			}
			out[strings.Join(vh.GetDomains(), ",")] = append(out[strings.Join(vh.GetDomains(), ",")], s)
		}
	}
	return out
}

// TestTagRoutesHostile: registrations that would take or break another
// service's host on a tag-routes listener do not. Two services claim one
// host in different cases: the route configuration stays valid for Envoy
// (one domain), the service whose name sorts first routes it, and a
// warning names both. A service's weight=, redirect= and Traefik
// priority cannot reach a host another service routes or the policy
// serves; owners let two services share a host.
func TestTagRoutesHostile(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "beta", "beta-1", 1001, []string{"traefik.http.routers.b.rule=Host(`Shop.example.com`)"}, nil)
	agent.RegisterTTL(t, "alpha", "alpha-1", 1002, []string{"traefik.http.routers.a.rule=Host(`shop.example.com`)"}, nil)
	agent.RegisterTTL(t, "web", "web-1", 1003, []string{"traefik.http.routers.w.rule=Host(`www.example.com`)"}, nil)
	agent.RegisterTTL(t, "api", "api-1", 2001, []string{"urlprefix-api.example.com/", "urlprefix-canary.example.com/"}, nil)
	agent.RegisterTTL(t, "api-v2", "api-v2-1", 2002, []string{"urlprefix-canary.example.com/ weight=0.1"}, nil)
	agent.RegisterTTL(t, "zz-thief", "zz-thief-1", 3001, []string{
		"traefik.http.routers.z.rule=Host(`www.example.com`) && PathPrefix(`/`)", "traefik.http.routers.z.priority=1000",
		"urlprefix-api.example.com/ weight=1",
		"urlprefix-API.example.com/login redirect=301,https://evil.example.net$path",
		"urlprefix-admin.example.com/ redirect=302,https://evil.example.net",
		"urlprefix-canary.example.com/ weight=0.9",
	}, nil)
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte(hostilePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
	})
	edge := dialAs(t, h, adsclient.Delta, "edge", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	st, err := edge.Wait(ctx, func(s adsclient.State) bool {
		tr, fb := s.RouteConfig("edge.traefik"), s.RouteConfig("edge.fabio")
		return tr != nil && fb != nil && len(tr.GetVirtualHosts()) >= 2 && len(fb.GetVirtualHosts()) >= 3
	})
	if err != nil {
		t.Fatalf("waiting for both tag-routes listeners: %v", err)
	}
	for _, name := range []string{"edge.traefik", "edge.fabio"} {
		if why := envoyDomainsOK(st.RouteConfig(name)); why != "" {
			t.Errorf("route configuration %s would be refused by Envoy: %s", name, why)
		}
	}
	want := map[string]map[string][]string{
		"edge.traefik": {
			"shop.example.com": {"/ -> alpha"}, // "alpha" sorts before "beta"
			"www.example.com":  {"/ -> web"},   // priority=1000 of zz-thief does not count
		},
		"edge.fabio": {
			"Admin.example.com":  {"/ -> direct"},     // the policy's host: no redirect added
			"api.example.com":    {"/ -> api"},        // no weight=1 split, no redirect of /login
			"canary.example.com": {"/ -> api api-v2"}, // owners share it; zz-thief's weight=0.9 is out
		},
	}
	for name, w := range want {
		got := routesByDomain(st.RouteConfig(name))
		for domain, routes := range w {
			if !slices.Equal(got[domain], routes) {
				t.Errorf("%s: virtual host %s routes %q, want %q (all: %q)", name, domain, got[domain], routes, got)
			}
		}
		if len(got) != len(w) {
			t.Errorf("%s: virtual hosts %q, want only %d", name, got, len(w))
		}
	}
	wantWarnings := []string{
		`service "beta" tag "traefik.http.routers.b.rule=Host(` + "`Shop.example.com`" + `)": host "shop.example.com" is already routed by service "alpha"`,
		`service "zz-thief" tag "traefik.http.routers.z.rule=Host(` + "`www.example.com`" + `) && PathPrefix(` + "`/`" + `)": host "www.example.com" is already routed by service "web"`,
		`service "zz-thief" tag "urlprefix-api.example.com/ weight=1": host "api.example.com" is already routed by service "api"`,
		`service "zz-thief" tag "urlprefix-API.example.com/login redirect=301,https://evil.example.net$path": host "api.example.com" is already routed by service "api"`,
		`service "zz-thief" tag "urlprefix-admin.example.com/ redirect=302,https://evil.example.net": host "admin.example.com" is served by the policy's own virtual host (domain "Admin.example.com")`,
		`service "zz-thief" tag "urlprefix-canary.example.com/ weight=0.9": host "canary.example.com" is reserved by tag_routes owners for "api", "api-v2"`,
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		joined := strings.Join(h.daemon.Policy().Warnings, "\n")
		var missing []string
		for _, w := range wantWarnings {
			if !strings.Contains(joined, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/v1/policy warnings lack %q:\n%s", missing, joined)
		}
	}
}
