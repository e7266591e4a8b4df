// Package examples holds runnable demos and sample policies; this test keeps
// every sample valid.
package examples

import (
	"path/filepath"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// TestPoliciesLoadAndTranslate loads every sample policy (and the demo's
// config) the way `validate` does and translates it against an empty
// catalog, so a sample that stops parsing or stops producing valid Envoy
// resources fails here.
func TestPoliciesLoadAndTranslate(t *testing.T) {
	files, err := filepath.Glob("policies/*.hcl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sample policies: %v", err)
	}
	files = append(files, "../config.hcl", "vm/config-local.hcl", "vm/config-central.hcl")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg, _, diags := policy.LoadFiles(f)
			if diags.HasErrors() {
				t.Fatalf("%s:\n%s", f, diags)
			}
			model, _ := bridge.Build(nil, cfg.Policy)
			if _, err := xds.Translate(model); err != nil {
				t.Fatalf("%s does not translate: %v", f, err)
			}
		})
	}
	// The two samples are meant to be deployed together.
	cfg, _, diags := policy.LoadFiles("policies/edge-gateway.hcl", "policies/sidecar.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if len(cfg.Policy.Proxies) != 2 || cfg.Policy.ProxyFor("sidecar-web-3") == nil || cfg.Policy.ProxyFor("edge").Name != "edge" {
		t.Fatalf("merged samples: proxies = %+v", cfg.Policy.Proxies)
	}
}
