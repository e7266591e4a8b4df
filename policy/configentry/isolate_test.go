package configentry_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/configentry"
)

// mergeDocs parses and merges documents as the bridge does; it returns
// the error lines.
func mergeDocs(t *testing.T, docs []configentry.Document) []string {
	t.Helper()
	var parsed []*policy.Document
	var lines []string
	for _, d := range docs {
		doc, ds := policy.ParseKV(d.Name, d.Source)
		if ds.HasErrors() {
			lines = append(lines, policy.FormatDiagnostics(ds)...)
		}
		if doc != nil {
			parsed = append(parsed, doc)
		}
	}
	if _, ds := policy.Merge(parsed...); ds.HasErrors() {
		lines = append(lines, policy.FormatDiagnostics(ds)...)
	}
	return lines
}

// TestCheckedRejectsAlone: entries Consul accepts but the policy cannot
// take (a path_regex and a header regex RE2 refuses) are each left out
// and named by their own kind and name, not by the ingress gateway whose
// document carries their routes; every other entry still translates.
func TestCheckedRejectsAlone(t *testing.T) {
	var e configentry.Entries
	for _, entry := range []api.ConfigEntry{
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "web", Protocol: "http"},
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "cart", Protocol: "http"},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", Subsets: map[string]api.ServiceResolverSubset{"v2": {Filter: `"v2" in Service.Tags`}}},
		&api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: "web", Splits: []api.ServiceSplit{{Weight: 90}, {Weight: 10, Service: "api"}}},
		&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "api", Routes: []api.ServiceRoute{
			{Match: &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{PathRegex: "/v2/("}}, Destination: &api.ServiceRouteDestination{ServiceSubset: "v2"}}}},
		&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "cart", Routes: []api.ServiceRoute{
			{Match: &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{Header: []api.ServiceRouteHTTPMatchHeader{{Name: "x-user", Regex: "[a-"}}}}}}},
		// Valid, applied nowhere, sorted first: suspected first, kept.
		&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "a-unused", Routes: []api.ServiceRoute{
			{Match: &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{PathPrefix: "/x/"}}}}},
		&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "web", Routes: []api.ServiceRoute{
			{Match: &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{PathPrefix: "/old/"}}, Destination: &api.ServiceRouteDestination{PrefixRewrite: "/"}}}},
		&api.IngressGatewayConfigEntry{Kind: api.IngressGateway, Name: "edge", Listeners: []api.IngressListener{{Port: 8080, Protocol: "http", Services: []api.IngressService{
			{Name: "api", Hosts: []string{"api.example.com"}}, {Name: "web", Hosts: []string{"www.example.com"}}, {Name: "cart", Hosts: []string{"cart.example.com"}}}}}},
	} {
		if err := e.Add(entry); err != nil {
			t.Fatal(err)
		}
	}
	// Unchecked, the regexes break the gateway's document: the whole
	// policy would be refused, at the gateway.
	all, _ := configentry.ToHCL(e)
	if errs := strings.Join(mergeDocs(t, all), "\n"); !strings.Contains(errs, "consul-config:ingress-gateway/edge") {
		t.Fatalf("precondition: the unchecked translation does not fail at the gateway's document:\n%s", errs)
	}

	docs, _, rejected := configentry.Checked(e)
	var names []string
	for _, r := range rejected {
		names = append(names, r.Entry)
		if len(r.Diagnostics) == 0 {
			t.Errorf("%s rejected without a diagnostic", r.Entry)
		}
	}
	if want := []string{"service-router/api", "service-router/cart"}; !slices.Equal(names, want) {
		t.Fatalf("rejected %q, want %q: %v", names, want, rejected)
	}
	if d := strings.Join(rejected[0].Diagnostics, " "); !strings.Contains(d, "/v2/(") {
		t.Errorf("service-router/api's diagnostic does not show the bad value: %s", d)
	}
	if d := strings.Join(rejected[1].Diagnostics, " "); !strings.Contains(d, "[a-") {
		t.Errorf("service-router/cart's diagnostic does not show the bad value: %s", d)
	}
	if s := rejected[0].String(); !strings.HasPrefix(s, "service-router/api: rejected") || strings.Contains(s, "ingress-gateway") {
		t.Errorf("rejection names the wrong entry: %s", s)
	}
	if errs := mergeDocs(t, docs); len(errs) > 0 {
		t.Fatalf("checked documents do not merge: %q", errs)
	}
	var gateway string
	for _, d := range docs {
		if d.Name == "consul-config:ingress-gateway/edge" {
			gateway = string(d.Source)
		}
	}
	for _, want := range []string{`"www.example.com"`, `path_prefix = "/old/"`, `weight  = 90`, `"api.example.com"`, `"cart.example.com"`} {
		if !strings.Contains(gateway, want) {
			t.Errorf("the gateway's document lost %s (the good entries must keep applying):\n%s", want, gateway)
		}
	}
	if strings.Contains(gateway, "/v2/(") || strings.Contains(gateway, "[a-") {
		t.Errorf("the rejected routers' routes are still in the gateway's document:\n%s", gateway)
	}

	// Valid entries: nothing rejected, the same documents as ToHCL.
	e.Routers = nil
	docs, _, rejected = configentry.Checked(e)
	plain, _ := configentry.ToHCL(e)
	if len(rejected) > 0 || !slices.EqualFunc(docs, plain, func(a, b configentry.Document) bool { return a.Name == b.Name && string(a.Source) == string(b.Source) }) {
		t.Errorf("valid entries: rejected %v, documents differ from ToHCL's", rejected)
	}
}
