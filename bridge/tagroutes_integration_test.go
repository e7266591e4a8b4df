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

const tagPolicy = `
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "shop" {
      domains = ["shop.example.com"]
      route {
        match {
          path_prefix = "/api"
        }
        direct_response {
          status = 503
          body   = "hcl wins"
        }
      }
    }
    tag_routes {
      format = "fabio"
      owners = { "shop.example.com" = ["api", "web"] }
    }
  }
}
`

// TestFabioTagRoutes: services registered with Fabio's urlprefix tags get
// routes on a listener with tag_routes (after the policy's own routes for
// the same host, which win); a bad tag is a warning on /v1/policy; a
// deregistered service's routes go.
func TestFabioTagRoutes(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, []string{"urlprefix-shop.example.com/", "urlprefix-/static strip=/static"}, nil)
	agent.RegisterTTL(t, "api", "api-1", 2001, []string{"urlprefix-shop.example.com/api", "urlprefix-/x weight=7"}, nil)
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte(tagPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
	})
	edge := dialAs(t, h, adsclient.Delta, "edge", nil)
	describe := func(rc *routev3.RouteConfiguration) []string {
		var out []string
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				s := strings.Join(vh.GetDomains(), ",") + " " + r.GetMatch().GetPrefix() + " -> "
				switch {
				case r.GetDirectResponse() != nil:
					s += "direct"
				default:
					s += r.GetRoute().GetCluster()
				}
				out = append(out, s)
			}
		}
		return out
	}
	wait := func(what string, pred func([]string) bool) []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		st, err := edge.Wait(ctx, func(s adsclient.State) bool {
			rc := s.RouteConfig("edge.http")
			return rc != nil && pred(describe(rc))
		})
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		return describe(st.RouteConfig("edge.http"))
	}
	want := []string{"shop.example.com /api -> direct", "shop.example.com /api -> api", "shop.example.com / -> web", "* /static -> web"}
	got := wait("the tag routes", func(d []string) bool { return len(d) == 4 })
	if !slices.Equal(got, want) {
		t.Fatalf("routes %q, want %q (the policy's route first)", got, want)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(strings.Join(h.daemon.Policy().Warnings, "\n"), `service "api" tag "urlprefix-/x weight=7"`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning for the bad tag on /v1/policy: %q", h.daemon.Policy().Warnings)
		}
	}
	if eps := edge.Snapshot().Endpoints("web"); len(eps) != 1 {
		t.Errorf("web endpoints = %v: a tag-routed service must be a cluster", eps)
	}
	agent.Deregister(t, "api-1")
	wait("the api tag route to go", func(d []string) bool {
		return !slices.Contains(d, "shop.example.com /api -> api") && slices.Contains(d, "shop.example.com / -> web")
	})
}
