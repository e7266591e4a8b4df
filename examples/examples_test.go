// Package examples holds runnable demos and sample policies; this test keeps
// every sample valid.
package examples

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/routetest"
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
			m, _ := model.Build(nil, cfg.Policy)
			if _, err := xds.Translate(m); err != nil {
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

// TestVMExamplesAreSecure: the deployable configs are secure as shipped:
// the central bridge serves xDS over mTLS with node authorization, and
// both keep the admin API on loopback behind a token.
func TestVMExamplesAreSecure(t *testing.T) {
	for _, f := range []string{"vm/config-local.hcl", "vm/config-central.hcl"} {
		cfg, _, diags := policy.LoadFiles(f)
		if diags.HasErrors() {
			t.Fatalf("%s:\n%s", f, diags)
		}
		a := cfg.Settings.Admin
		if !strings.HasPrefix(a.Listen, "127.0.0.1:") || a.TokenFile == "" || a.Pprof {
			t.Errorf("%s: admin = %+v, want loopback with a token and no pprof", f, a)
		}
		x := cfg.Settings.XDS
		if !strings.HasPrefix(x.Listen, "127.0.0.1:") && (x.TLS.CertFile == "" || x.TLS.ClientCAFile == "" || !x.AuthorizeNodes) {
			t.Errorf("%s: xDS on %s without mTLS and authorize_nodes: %+v", f, x.Listen, x)
		}
	}
}

// TestEdgeGatewayRouteTests runs the edge gateway's route tests (what
// `make test` runs with the CLI) and checks they cover every kind of
// expectation the sample shows.
func TestEdgeGatewayRouteTests(t *testing.T) {
	suite, diags := routetest.Load("policies/edge-gateway.hcl", "policies/edge-gateway.test.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if len(suite.Tests) < 8 {
		t.Fatalf("only %d route tests", len(suite.Tests))
	}
	cat, err := consul.ReadFixtureFile("policies/edge-gateway.catalog.json")
	if err != nil {
		t.Fatal(err)
	}
	results, diags := routetest.Run(suite.Config.Policy, cat, suite.Tests)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	var out bytes.Buffer
	if failed := routetest.Report(&out, results); failed > 0 {
		t.Fatalf("%d route tests failed:\n%s", failed, out.String())
	}
	// Every route of the sample is exercised, and one request matches none.
	exercised := map[string]bool{}
	for _, r := range results {
		exercised[r.Route] = true
	}
	if !exercised[""] {
		t.Errorf("no test sends a request that matches no route:\n%s", out.String())
	}
	for _, l := range suite.Config.Policy.ProxyFor("edge").Listeners {
		if l.Name != "http" {
			continue
		}
		for _, vh := range l.VirtualHosts {
			for _, r := range vh.Routes {
				if !exercised[r.Source] {
					t.Errorf("no route test reaches the route at %s", r.Source)
				}
			}
		}
	}
}
