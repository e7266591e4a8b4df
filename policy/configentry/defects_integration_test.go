package configentry_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/configentry"
)

// TestServiceDefaultsFromConsulHaveNoFalseNotes: a service-defaults entry
// written to a real Consul and read back (Consul fills in
// "TransparentProxy": {}, "MeshGateway": {}, "Expose": {}) translates
// without a note about settings it never set (issue 39, item 3).
func TestServiceDefaultsFromConsulHaveNoFalseNotes(t *testing.T) {
	agent := consultest.Start(t)
	c := agent.Client()
	if _, _, err := c.ConfigEntries().Set(&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"}, nil); err != nil {
		t.Fatal(err)
	}
	entries, _, err := c.ConfigEntries().List(api.ServiceDefaults, nil)
	if err != nil {
		t.Fatal(err)
	}
	var e configentry.Entries
	for _, entry := range entries {
		if err := e.Add(entry); err != nil {
			t.Fatal(err)
		}
	}
	if d := e.Defaults["api"]; d == nil || d.TransparentProxy == nil {
		t.Fatalf("Consul 1.15 returns an empty TransparentProxy object; read %+v (the test no longer covers the defect)", d)
	}
	docs, notes := configentry.ToHCL(e)
	if len(notes) > 0 {
		t.Errorf("notes for an entry that sets only its protocol: %v", notes)
	}
	if len(docs) != 1 {
		t.Fatalf("docs = %v", docs)
	}
	// A setting is still noted.
	e.Defaults["api"].Mode = api.ProxyModeTransparent
	if _, notes := configentry.ToHCL(e); len(notes) != 1 || !strings.Contains(notes[0].Text, "transparent proxy mode") {
		t.Errorf("mode transparent: notes %v, want one about transparent proxy mode", notes)
	}
}

// TestUpstreamOverridesAreNotTheUpstreamsSettings: web's
// upstream_config.overrides for api are how web's sidecars reach api;
// they do not become api's service block (every caller's settings), and a
// note says where they apply (issue 39, item 4).
func TestUpstreamOverridesAreNotTheUpstreamsSettings(t *testing.T) {
	three := 3
	for _, mesh := range []bool{false, true} {
		e := configentry.Entries{Mesh: mesh, Defaults: map[string]*api.ServiceConfigEntry{
			"web": {Kind: api.ServiceDefaults, Name: "web", UpstreamConfig: &api.UpstreamConfiguration{Overrides: []*api.UpstreamConfig{
				{Name: "api", ConnectTimeoutMs: 7000, Limits: &api.UpstreamLimits{MaxConnections: &three}}}}},
			"api": {Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		}}
		docs, notes := configentry.ToHCL(e)
		for _, d := range docs {
			if s := string(d.Source); strings.Contains(s, "connect_timeout") || strings.Contains(s, "circuit_breaker") {
				t.Errorf("mesh %v: %s carries web's overrides for api:\n%s", mesh, d.Name, s)
			}
		}
		want := "apply nowhere"
		if mesh {
			want = "apply to web's sidecars' mesh cluster of api only"
		}
		if len(notes) != 1 || notes[0].Entry != "service-defaults/web" || !strings.Contains(notes[0].Text, want) {
			t.Errorf("mesh %v: notes %v, want one at service-defaults/web saying %q", mesh, notes, want)
		}
	}
}

// TestGatewayRoutesFollowTheChain: an api-gateway's http-route to api
// follows api's chain (90/10 over its subsets) once the documents are
// merged, as Consul's gateways route; an ingress gateway's routes, made
// through the chain already, are not split twice.
func TestGatewayRoutesFollowTheChain(t *testing.T) {
	e := configentry.Entries{}
	for _, entry := range []api.ConfigEntry{
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", DefaultSubset: "v1", Subsets: map[string]api.ServiceResolverSubset{
			"v1": {Filter: `"v1" in Service.Tags`}, "v2": {Filter: `"v2" in Service.Tags`}}},
		&api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: "api", Splits: []api.ServiceSplit{{Weight: 90, ServiceSubset: "v1"}, {Weight: 10, ServiceSubset: "v2"}}},
		&api.APIGatewayConfigEntry{Kind: api.APIGateway, Name: "gw", Listeners: []api.APIGatewayListener{{Name: "http", Port: 8080, Protocol: "http"}}},
		&api.HTTPRouteConfigEntry{Kind: api.HTTPRoute, Name: "r", Parents: []api.ResourceReference{{Kind: api.APIGateway, Name: "gw"}},
			Rules: []api.HTTPRouteRule{{Services: []api.HTTPService{{Name: "api"}}}}},
		&api.IngressGatewayConfigEntry{Kind: api.IngressGateway, Name: "ing", Listeners: []api.IngressListener{{Port: 9090, Protocol: "http", Services: []api.IngressService{{Name: "api"}}}}},
	} {
		if err := e.Add(entry); err != nil {
			t.Fatal(err)
		}
	}
	pol, _ := policyOf(t, e)
	for _, gw := range []string{"gw", "ing"} {
		p := pol.ProxyFor(gw)
		if p == nil || len(p.Listeners) == 0 || len(p.Listeners[0].VirtualHosts) == 0 {
			t.Fatalf("no listener routes for %s: %+v", gw, p)
		}
		routes := p.Listeners[0].VirtualHosts[0].Routes
		last := routes[len(routes)-1]
		var got []string
		for _, tg := range last.Targets {
			got = append(got, fmt.Sprintf("%s.%s=%d", tg.Service, tg.Subset, tg.Weight))
		}
		if want := []string{"api.v1=90", "api.v2=10"}; !slices.Equal(got, want) {
			t.Errorf("%s: last route targets %v, want %v", gw, got, want)
		}
	}
}

// TestResolverRedirectFollowed: a service-resolver redirect to another
// service in this datacenter is where the chain sends the service's
// traffic (to that service's resolver, its default subset here), in the
// chain block and the mesh's routes, without a "not translated" note.
func TestResolverRedirectFollowed(t *testing.T) {
	e := configentry.Entries{Mesh: true}
	for _, entry := range []api.ConfigEntry{
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", Redirect: &api.ServiceResolverRedirect{Service: "api-new"}},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api-new", DefaultSubset: "blue", Subsets: map[string]api.ServiceResolverSubset{
			"blue": {Filter: `"blue" in Service.Tags`}}},
	} {
		if err := e.Add(entry); err != nil {
			t.Fatal(err)
		}
	}
	docs, notes := configentry.ToHCL(e)
	for _, n := range notes {
		if strings.Contains(n.Text, "redirect") {
			t.Errorf("note about a redirect the chain follows: %s", n)
		}
	}
	var src string
	for _, d := range docs {
		if strings.Contains(string(d.Source), `chain "api"`) {
			src = string(d.Source)
		}
	}
	want := "route {\n    service = \"api-new\"\n    subset  = \"blue\"\n  }"
	if strings.Count(src, want) != 2 || !strings.Contains(src, `mesh_routes "api"`) {
		t.Errorf("chain and mesh_routes of api do not both send to api-new's default subset:\n%s", src)
	}
}
