package bridge_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestHugeRegexFromConfigEntryRefused: a service-router whose PathRegex
// is 100 KB (Envoy's RE2 would refuse it: its default program size limit
// is 100) is rejected with a short diagnostic at the entry that quotes
// only the pattern's start; the last good policy keeps serving and a
// health flip still reaches a proxy within 1s. A pattern under the limit
// (^/api/v[0-9]+/.*) is accepted.
func TestHugeRegexFromConfigEntryRefused(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	ce := agent.Client().ConfigEntries()
	write := func(e api.ConfigEntry) {
		t.Helper()
		if _, _, err := ce.Set(e, nil); err != nil {
			t.Fatalf("writing %s %s: %v", e.GetKind(), e.GetName(), err)
		}
	}
	router := func(re string) *api.ServiceRouterConfigEntry {
		return &api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "web", Routes: []api.ServiceRoute{{
			Match:       &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{PathRegex: re}},
			Destination: &api.ServiceRouteDestination{Service: "web"},
		}}}
	}
	write(&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "web", Protocol: "http"})
	write(router(`^/api/v[0-9]+/.*`))
	write(&api.IngressGatewayConfigEntry{Kind: api.IngressGateway, Name: "edge", Listeners: []api.IngressListener{
		{Port: 8080, Protocol: "http", Services: []api.IngressService{{Name: "web", Hosts: []string{"web.example.com"}}}}}})
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) { c.Settings.Consul.ConfigEntries = true })
	good := dialAs(t, h, adsclient.Delta, "edge", nil)
	waitEndpoints(t, "web", ep(1001, "HEALTHY"), good)
	if st := h.daemon.Policy(); st.LastError != nil {
		t.Fatalf("a simple regex was refused: %v", st.LastError.Diagnostics)
	}

	huge := "^/(" + strings.Repeat("a", 100<<10) + ")$"
	write(router(huge))
	deadline := time.Now().Add(15 * time.Second)
	for {
		if e := h.daemon.Policy().LastError; e != nil {
			got := strings.Join(e.Diagnostics, "\n")
			if !strings.Contains(got, "Invalid regular expression") || !strings.Contains(got, "consul-config:") {
				t.Fatalf("diagnostics %q; want an invalid regular expression at a config entry", got)
			}
			if len(got) > 1000 {
				t.Fatalf("the diagnostic is %d bytes: it must not quote the whole pattern", len(got))
			}
			t.Log(got)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the 100 KB regex was not refused within 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	fl := &healthFlipper{agent: agent, c: good, healthy: true}
	fl.flip(t)
	fl.flip(t)
}
