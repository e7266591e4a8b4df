package routetest

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// meshModel is a model with one sidecar group for "api" (named like the
// policy group "api-envoys", as sidecar_for groups are), a registered
// sidecar's group of the same registration, and a plain group.
func meshModel() *ir.Model {
	td := "11111111-2222-3333-4444-555555555555.consul"
	billing := ir.MeshClusterName("billing", "dc1", td)
	sc := ir.Sidecar{
		ProxyID: "api-sidecar-proxy", Node: "node-1", Service: "api", Datacenter: "dc1", Port: 21000,
		LocalCluster: "local_app:api", Protocol: "http",
		Upstreams: []ir.MeshUpstream{{Service: "billing", BindPort: 19000, Protocol: "http", Cluster: billing}},
		Intentions: ir.Intentions{Default: ir.IntentionDeny, Rules: []ir.IntentionRule{
			{Source: "web", Precedence: 9, Permissions: []ir.IntentionPermission{
				{Action: ir.IntentionDeny, Methods: []string{"DELETE"}},
				{Action: ir.IntentionAllow, PathPrefix: "/v1/"},
			}},
			{Source: "*", Action: ir.IntentionDeny, Precedence: 8},
			{Source: "ops", Action: ir.IntentionAllow, Precedence: 6},
		}},
	}
	registered := sc
	ep := []ir.Endpoint{{Address: netip.MustParseAddr("127.0.0.1"), Port: 8080, Weight: 1}}
	return &ir.Model{
		Mesh: &ir.Mesh{TrustDomain: td},
		Clusters: []*ir.Cluster{
			{Name: billing, ConnectTimeout: time.Second, Endpoints: ep, TLS: &ir.UpstreamTLS{SNI: billing, CertificateSecret: ir.LeafSecretPrefix + "api", CASecret: ir.RootsSecretName, MatchURISANs: []string{ir.SPIFFEID(td, "dc1", "billing")}}},
			{Name: "local_app:api", ConnectTimeout: time.Second, Endpoints: ep},
		},
		Groups: []ir.Group{
			{Name: "api-envoys", Sidecar: &sc, Clusters: []string{billing, "local_app:api"}},
			{Name: "edge"},
			{Name: ir.SidecarGroupName("node-1", "api-sidecar-proxy"), Sidecar: &registered, Clusters: []string{billing, "local_app:api"}},
		},
	}
}

func runMesh(t *testing.T, src string) []*Result {
	t.Helper()
	pol, diags := policy.Parse("policy.hcl", []byte("proxy \"api-envoys\" {\n  upstreams = [\"billing\"]\n}\nproxy \"edge\" {\n  upstreams = [\"billing\"]\n}\n"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	doc, diags := policy.Parse("tests.hcl", []byte(src))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	cfg, diags := policy.Merge(pol, doc)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	tests, diags := Decode(doc)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	m := meshModel()
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(cfg.Policy, m, out)
	var res []*Result
	for _, tc := range tests {
		res = append(res, e.run(tc))
	}
	return res
}

func TestIntentionExpectations(t *testing.T) {
	cases := map[string]struct {
		src string
		// want: "" passes; else a failure containing it.
		want, got string
	}{
		"allowed by a permission": {src: `
route_test "t" {
  proxy = "api-envoys"
  request {
    host   = "api"
    path   = "/v1/items?page=2"
    source = "web"
  }
  expect {
    intention = "allow"
  }
}`, got: `allow by the intention of source "web" (precedence 9), permission 1`},
		"denied by an earlier permission": {src: `
route_test "t" {
  proxy = "api-envoys"
  request {
    host   = "api"
    path   = "/v1/items/7"
    method = "DELETE"
    source = "web"
  }
  expect {
    intention = "allow"
  }
}`, want: `intention: expected allow, got from "web" to "api": deny by the intention of source "web" (precedence 9), permission 0`},
		"no permission matches: the default, not the wildcard": {src: `
route_test "t" {
  proxy = "api-envoys"
  request {
    host   = "api"
    path   = "/admin"
    source = "web"
  }
  expect {
    intention = "deny"
  }
}`, got: "no permission matches: the default"},
		"wildcard of the destination over exact of the wildcard entry": {src: `
route_test "t" {
  proxy = "sidecar:node-1/api-sidecar-proxy"
  request {
    host   = "api"
    source = "ops"
  }
  expect {
    intention = "deny"
  }
}`, got: `deny by the intention of source "*" (precedence 8)`},
		"not a sidecar": {src: `
route_test "t" {
  proxy = "edge"
  request {
    host   = "api"
    source = "ops"
  }
  expect {
    intention = "deny"
  }
}`, want: `group "edge" is no Connect sidecar`},
		"no such group": {src: `
route_test "t" {
  proxy = "nowhere"
  request {
    host   = "api"
    source = "ops"
  }
  expect {
    intention = "deny"
  }
}`, want: `no sidecar group matches "nowhere"`},
		"with a route of an upstream listener": {src: `
route_test "t" {
  proxy    = "api-envoys"
  listener = "upstream.billing"
  request {
    host   = "billing"
    path   = "/v1/x"
    source = "web"
  }
  expect {
    service   = "billing.default.dc1.internal.11111111-2222-3333-4444-555555555555.consul"
    intention = "allow"
  }
}`, got: `; from "web" to "api": allow`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res := runMesh(t, tc.src)
			if len(res) != 1 {
				t.Fatalf("%d results", len(res))
			}
			r := res[0]
			if tc.want == "" {
				if !r.Passed() {
					t.Fatalf("failed: %+v (got %s)", r.Failures, r.Got)
				}
			} else if len(r.Failures) != 1 || !strings.Contains(r.Failures[0].Message, tc.want) {
				t.Fatalf("failures %+v, want one containing %q", r.Failures, tc.want)
			} else if r.Failures[0].Subject.Start.Line == 0 {
				t.Errorf("failure without a position: %+v", r.Failures[0])
			}
			if !strings.Contains(r.Got, tc.got) {
				t.Errorf("got %q, want it to contain %q", r.Got, tc.got)
			}
		})
	}
}

func TestIntentionDecodeErrors(t *testing.T) {
	for name, tc := range map[string]struct{ src, want string }{
		"unknown decision": {`route_test "t" {
  proxy = "api-envoys"
  request {
    host   = "api"
    source = "web"
  }
  expect {
    intention = "maybe"
  }
}`, "Invalid intention"},
		"no source": {`route_test "t" {
  proxy = "api-envoys"
  request {
    host = "api"
  }
  expect {
    intention = "allow"
  }
}`, "Intention without source"},
		"wildcard source": {`route_test "t" {
  proxy = "api-envoys"
  request {
    host   = "api"
    source = "*"
  }
  expect {
    intention = "allow"
  }
}`, "Invalid source"},
	} {
		t.Run(name, func(t *testing.T) {
			doc, diags := policy.Parse("tests.hcl", []byte(tc.src))
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			_, diags = Decode(doc)
			if !diags.HasErrors() || !strings.Contains(diags.Error(), tc.want) {
				t.Fatalf("diagnostics %v, want %q", diags, tc.want)
			}
			for _, d := range diags {
				if d.Subject == nil || d.Subject.Start.Line < 2 {
					t.Errorf("diagnostic %q at %v, want the attribute's line", d.Summary, d.Subject)
				}
			}
		})
	}
}
