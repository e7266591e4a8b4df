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

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

const filesBeside = `
proxy "files" {
  listener "http" {
    port = 9090
    virtual_host "all" {
      domains = ["*"]
      route {
        direct_response {
          status = 200
          body   = "BODY"
        }
      }
    }
  }
}
`

// TestUntranslatableConfigEntryRejectedAlone: a service-router Consul
// accepts but the bridge cannot translate (a path_regex RE2 refuses) is
// rejected alone, named by its own kind and name on /v1/policy (not by
// the ingress gateway whose document carries its routes), while a
// splitter change and an HCL file change made at the same time apply and
// are served; deleting the router clears the warning.
func TestUntranslatableConfigEntryRejectedAlone(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "api", "api-1", 2001, nil, map[string]string{"version": "v1"})
	agent.RegisterTTL(t, "api", "api-2", 2002, []string{"v2"}, nil)
	agent.RegisterTTL(t, "web", "web-1", 3001, nil, nil)
	ce := agent.Client().ConfigEntries()
	write := func(e api.ConfigEntry) {
		t.Helper()
		if _, _, err := ce.Set(e, nil); err != nil {
			t.Fatalf("writing %s %s: %v", e.GetKind(), e.GetName(), err)
		}
	}
	write(&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"})
	write(&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "web", Protocol: "http"})
	write(&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", Subsets: map[string]api.ServiceResolverSubset{
		"v1": {Filter: "Service.Meta.version == v1"}, "v2": {Filter: `"v2" in Service.Tags`}}})
	split := func(v1, v2 float32) *api.ServiceSplitterConfigEntry {
		return &api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: "api", Splits: []api.ServiceSplit{{Weight: v1, ServiceSubset: "v1"}, {Weight: v2, ServiceSubset: "v2"}}}
	}
	write(split(50, 50))
	write(&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "web", Routes: []api.ServiceRoute{{
		Match: &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{PathPrefix: "/old/"}}, Destination: &api.ServiceRouteDestination{PrefixRewrite: "/"}}}})
	write(&api.IngressGatewayConfigEntry{Kind: api.IngressGateway, Name: "edge", Listeners: []api.IngressListener{{Port: 8080, Protocol: "http",
		Services: []api.IngressService{{Name: "api", Hosts: []string{"api.example.com"}}, {Name: "web", Hosts: []string{"www.example.com"}}}}}})

	file := filepath.Join(t.TempDir(), "policy.hcl")
	writeFile := func(body string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(strings.Replace(filesBeside, "BODY", body, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeFile("v1")
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.Settings.Consul.ConfigEntries = true
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
	})
	edge := dialAs(t, h, adsclient.Delta, "edge", nil)
	files := dialAs(t, h, adsclient.Delta, "files", nil)
	apiWeights := func(rc *routev3.RouteConfiguration) []uint32 {
		for _, vh := range rc.GetVirtualHosts() {
			if vh.GetName() != "api" {
				continue
			}
			rs := vh.GetRoutes()
			var out []uint32
			for _, c := range rs[len(rs)-1].GetRoute().GetWeightedClusters().GetClusters() {
				out = append(out, c.GetWeight().GetValue())
			}
			return out
		}
		return nil
	}
	webRewrite := func(rc *routev3.RouteConfiguration) bool {
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				if vh.GetName() == "web" && r.GetMatch().GetPrefix() == "/old/" && r.GetRoute().GetPrefixRewrite() == "/" {
					return true
				}
			}
		}
		return false
	}
	// body is the files listener's response body; withdrawn notes a state
	// without its route configuration once it was served (the listener
	// and its routes must stay while the file changes).
	withdrawn := false
	body := func(s adsclient.State) string {
		rc := s.RouteConfig("files.http")
		if rc == nil {
			withdrawn = true
			return ""
		}
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				return r.GetDirectResponse().GetBody().GetInlineString()
			}
		}
		return ""
	}
	wait := func(c *adsclient.Client, what string, pred func(adsclient.State) bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if _, err := c.Wait(ctx, pred); err != nil {
			t.Fatalf("waiting for %s: %v (policy status: %+v)", what, err, h.daemon.Policy())
		}
	}
	wait(edge, "the gateway from the entries", func(s adsclient.State) bool {
		rc := s.RouteConfig("edge.port-8080")
		w := apiWeights(rc)
		return rc != nil && len(w) == 2 && w[0] == 50 && webRewrite(rc)
	})
	wait(files, "the HCL file's listener", func(s adsclient.State) bool { return body(s) == "v1" })
	withdrawn = false

	// An untranslatable router; once the bridge has seen it (rejected
	// alone, or the whole policy), a splitter change and a file change.
	write(&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "api", Routes: []api.ServiceRoute{{
		Match: &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{PathRegex: "/v2/("}}, Destination: &api.ServiceRouteDestination{ServiceSubset: "v2"}}}})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st := h.daemon.Policy()
		if st.LastError != nil || strings.Contains(strings.Join(st.PolicyWarnings, "\n"), "/v2/(") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bridge did not see the router: %+v", st)
		}
	}
	write(split(90, 10))
	writeFile("v2")

	wait(edge, "the splitter change", func(s adsclient.State) bool {
		rc := s.RouteConfig("edge.port-8080")
		w := apiWeights(rc)
		return len(w) == 2 && w[0] == 90 && w[1] == 10 && webRewrite(rc)
	})
	wait(files, "the HCL change", func(s adsclient.State) bool { return body(s) == "v2" })
	if withdrawn {
		t.Errorf("the files proxy's route configuration was withdrawn while its file changed")
	}
	for _, vh := range edge.Snapshot().RouteConfig("edge.port-8080").GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if r.GetMatch().GetSafeRegex() != nil {
				t.Errorf("the rejected router's route is served: %v", r)
			}
		}
	}
	var rejection string
	for deadline := time.Now().Add(10 * time.Second); rejection == ""; time.Sleep(20 * time.Millisecond) {
		st := h.daemon.Policy()
		for _, w := range st.PolicyWarnings {
			if strings.Contains(w, "Config entry rejected") {
				rejection = w
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no rejection on /v1/policy: %+v", st)
		}
	}
	if !strings.HasPrefix(rejection, "consul-config:service-router/api") || !strings.Contains(rejection, "/v2/(") || strings.Contains(rejection, "ingress-gateway") {
		t.Errorf("the rejection must name service-router/api (and show the bad value), not the gateway: %s", rejection)
	}
	if st := h.daemon.Policy(); st.LastError != nil {
		t.Errorf("the policy was rejected whole: %v", st.LastError.Diagnostics)
	}

	// Deleting the router clears the warning.
	if _, err := ce.Delete(api.ServiceRouter, "api", nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if !strings.Contains(strings.Join(h.daemon.Policy().PolicyWarnings, "\n"), "Config entry rejected") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rejection stays after the router was deleted: %q", h.daemon.Policy().PolicyWarnings)
		}
	}
}
