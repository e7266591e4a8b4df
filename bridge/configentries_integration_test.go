package bridge_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/proto"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// handWritten is the HCL an operator would write for the entries below.
const handWritten = `
service "api" {
  subset "v1" {
    meta = { version = "v1" }
  }
  subset "v2" {
    tags = ["v2"]
  }
}
proxy "edge" {
  listener "port-8080" {
    port = 8080
    virtual_host "api" {
      domains = ["api.example.com"]
      route {
        match {
          path_prefix = "/beta/"
          header "x-beta" {
            exact = "1"
          }
        }
        service = "api"
        subset  = "v2"
        timeout = "2s"
        rewrite {
          prefix = "/"
        }
      }
      route {
        split {
          service = "api"
          subset  = "v1"
          weight  = 50
        }
        split {
          service = "api"
          subset  = "v2"
          weight  = 50
        }
      }
    }
  }
}
`

// TestConfigEntriesAsPolicy: with consul.config_entries, Consul's own
// service-defaults, service-resolver, service-splitter, service-router and
// ingress-gateway entries are served as the HCL with the same meaning is (the same route
// configuration, proto-equal); an entry change reaches a proxy within a
// second; an entry the bridge cannot fully translate is reported on
// /v1/policy at the entry while the rest keeps serving.
func TestConfigEntriesAsPolicy(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "api", "api-1", 2001, nil, map[string]string{"version": "v1"})
	agent.RegisterTTL(t, "api", "api-2", 2002, []string{"v2"}, nil)
	ce := agent.Client().ConfigEntries()
	write := func(e api.ConfigEntry) {
		t.Helper()
		if _, _, err := ce.Set(e, nil); err != nil {
			t.Fatalf("writing %s %s: %v", e.GetKind(), e.GetName(), err)
		}
	}
	write(&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"})
	write(&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", Subsets: map[string]api.ServiceResolverSubset{
		"v1": {Filter: "Service.Meta.version == v1"}, "v2": {Filter: `"v2" in Service.Tags`}}})
	write(&api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: "api", Splits: []api.ServiceSplit{{Weight: 50, ServiceSubset: "v1"}, {Weight: 50, ServiceSubset: "v2"}}})
	write(&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "api", Routes: []api.ServiceRoute{{
		Match:       &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{PathPrefix: "/beta/", Header: []api.ServiceRouteHTTPMatchHeader{{Name: "x-beta", Exact: "1"}}}},
		Destination: &api.ServiceRouteDestination{ServiceSubset: "v2", RequestTimeout: 2 * time.Second, PrefixRewrite: "/"},
	}}})
	write(&api.IngressGatewayConfigEntry{Kind: api.IngressGateway, Name: "edge", Listeners: []api.IngressListener{
		{Port: 8080, Protocol: "http", Services: []api.IngressService{{Name: "api", Hosts: []string{"api.example.com"}}}}}})

	fromEntries := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) { c.Settings.Consul.ConfigEntries = true })
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte(handWritten), 0o644); err != nil {
		t.Fatal(err)
	}
	fromHCL := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
	})
	a := dialAs(t, fromEntries, adsclient.Delta, "edge", nil)
	b := dialAs(t, fromHCL, adsclient.Delta, "edge", nil)
	routes := func(c *adsclient.Client, pred func(*routev3.RouteConfiguration) bool) *routev3.RouteConfiguration {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		st, err := c.Wait(ctx, func(s adsclient.State) bool {
			rc := s.RouteConfig("edge.port-8080")
			return rc != nil && pred(rc) && len(s.Endpoints("api.v2")) == 1
		})
		if err != nil {
			t.Fatalf("waiting for the edge routes: %v", err)
		}
		return st.RouteConfig("edge.port-8080")
	}
	any := func(*routev3.RouteConfiguration) bool { return true }
	if x, y := routes(a, any), routes(b, any); !proto.Equal(x, y) {
		t.Fatalf("routes from config entries differ from the hand-written HCL's:\nentries: %v\nHCL:     %v", x, y)
	}
	if x, y := a.Snapshot().Cluster("api.v2"), b.Snapshot().Cluster("api.v2"); !proto.Equal(x, y) {
		t.Fatalf("cluster api.v2 differs:\nentries: %v\nHCL:     %v", x, y)
	}

	// A changed split reaches the proxy within a second.
	start := time.Now()
	write(&api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: "api", Splits: []api.ServiceSplit{{Weight: 90, ServiceSubset: "v1"}, {Weight: 10, ServiceSubset: "v2"}}})
	routes(a, func(rc *routev3.RouteConfiguration) bool {
		wc := rc.GetVirtualHosts()[0].GetRoutes()[1].GetRoute().GetWeightedClusters().GetClusters()
		return len(wc) == 2 && wc[0].GetWeight().GetValue() == 90
	})
	if took := time.Since(start); took > time.Second {
		t.Errorf("a splitter change took %v to reach the proxy, want within 1s", took)
	} else {
		t.Logf("splitter change reached the proxy in %v", took)
	}

	// An untranslatable subset: reported at its entry, the rest serves.
	write(&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", Subsets: map[string]api.ServiceResolverSubset{
		"v1": {Filter: "Service.Meta.version == v1"}, "v2": {Filter: `"v2" in Service.Tags`}, "odd": {Filter: "Service.Meta.version != v3"}}})
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(strings.Join(fromEntries.daemon.Policy().PolicyWarnings, "\n"), "consul-config:service-resolver/api") {
		if time.Now().After(deadline) {
			t.Fatalf("no warning at the entry on /v1/policy: %v", fromEntries.daemon.Policy().PolicyWarnings)
		}
		time.Sleep(20 * time.Millisecond)
	}
	agent.SetTTL(t, "service:api-2", "critical")
	waitEndpoints(t, "api.v2", ep(2002, "UNHEALTHY"), a)
}
