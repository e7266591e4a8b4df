package configentry_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/configentry"
)

// TestFailoverTranslated: a resolver's failovers (per subset and "*",
// to another subset, another service, by Targets) become the policy's
// failover with Consul's targets; another service without a subset is
// its resolver's default subset; a target in a peer is noted and left
// out, the rest kept.
func TestFailoverTranslated(t *testing.T) {
	var e configentry.Entries
	for _, c := range []api.ConfigEntry{
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", DefaultSubset: "v1",
			Subsets:  map[string]api.ServiceResolverSubset{"v1": {Filter: `"v1" in Service.Tags`}, "v2": {Filter: `"v2" in Service.Tags`}},
			Failover: map[string]api.ServiceResolverFailover{"v1": {ServiceSubset: "v2"}, "*": {Service: "api-backup", Datacenters: []string{"dc2"}}}},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api-backup", DefaultSubset: "blue",
			Subsets: map[string]api.ServiceResolverSubset{"blue": {Filter: `"blue" in Service.Tags`}}},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "db",
			Failover: map[string]api.ServiceResolverFailover{"*": {Targets: []api.ServiceResolverFailoverTarget{
				{Service: "db-backup"}, {Peer: "other"}, {Datacenter: "dc3"}}}}},
	} {
		if err := e.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	pol, notes := policyOf(t, e)
	for _, tc := range []struct {
		service, subset string
		want            []policy.FailoverTarget
	}{
		{"api", "v1", []policy.FailoverTarget{{Service: "api", Subset: "v2"}}},
		{"api", "v2", []policy.FailoverTarget{{Service: "api-backup", Subset: "blue", Datacenter: "dc2"}}},
		{"db", "", []policy.FailoverTarget{{Service: "db-backup"}, {Service: "db", Datacenter: "dc3"}}},
	} {
		if got := pol.Service(tc.service).FailoverFor(tc.subset); !slices.Equal(got, tc.want) {
			t.Errorf("%s subset %q fails over to %+v, want %+v", tc.service, tc.subset, got, tc.want)
		}
	}
	if !slices.ContainsFunc(notes, func(n configentry.Note) bool { return strings.Contains(n.String(), "peer") }) {
		t.Errorf("no note for the target in a peer: %v", notes)
	}
	if slices.ContainsFunc(notes, func(n configentry.Note) bool { return strings.Contains(n.String(), "only datacenter lists") }) {
		t.Errorf("a note that failovers are not translated: %v", notes)
	}
}

// policyOf is the policy e translates to, read as the daemon reads it
// (KV documents, merged), and the translation's notes.
func policyOf(t *testing.T, e configentry.Entries) (*policy.Policy, []configentry.Note) {
	t.Helper()
	docs, notes := configentry.ToHCL(e)
	var parsed []*policy.Document
	for _, d := range docs {
		doc, diags := policy.ParseKV(d.Name, d.Source)
		if diags.HasErrors() {
			t.Fatalf("%s: %v\n%s", d.Name, diags, d.Source)
		}
		parsed = append(parsed, doc)
	}
	cfg, diags := policy.Merge(parsed...)
	if diags.HasErrors() {
		t.Fatal(policy.FormatDiagnostics(diags))
	}
	return cfg.Policy, notes
}
