// Package policytest makes policies from HCL text for tests: one file
// parsed and merged as the daemon merges its files, failing the test on
// any error diagnostic.
package policytest

import (
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// Config is the configuration the policy file name with contents src makes.
func Config(t testing.TB, name string, src []byte) *policy.Config {
	t.Helper()
	doc, diags := policy.Parse(name, src)
	if diags.HasErrors() {
		t.Fatalf("%s: %v", name, diags)
	}
	cfg, diags := policy.Merge(doc)
	if diags.HasErrors() {
		t.Fatalf("%s: %v", name, diags)
	}
	return cfg
}

// Policy is the routing policy src makes (as a file named p.hcl).
func Policy(t testing.TB, src string) *policy.Policy {
	t.Helper()
	return Config(t, "p.hcl", []byte(src)).Policy
}
