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
	// The router is rejected alone (the other entries keep applying),
	// named by its own kind and name, with the size in the reason.
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := h.daemon.Policy()
		var got string
		for _, w := range st.PolicyWarnings {
			if strings.Contains(w, "consul-config:service-router/web") && strings.Contains(w, "rejected") {
				got = w
			}
		}
		if got != "" {
			if !strings.Contains(got, "regular expression") && !strings.Contains(got, "regex") {
				t.Fatalf("rejection %q; want the regular expression named", got)
			}
			if len(got) > 1000 {
				t.Fatalf("the diagnostic is %d bytes: it must not quote the whole pattern", len(got))
			}
			if st.LastError != nil {
				t.Fatalf("the whole reload was rejected for one entry: %v", st.LastError.Diagnostics)
			}
			t.Log(got)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 100 KB regex was not refused within 15s; warnings %q, last error %v", st.PolicyWarnings, st.LastError)
		}
		time.Sleep(20 * time.Millisecond)
	}
	fl := &healthFlipper{agent: agent, c: good, healthy: true}
	fl.flip(t)
	fl.flip(t)
}
