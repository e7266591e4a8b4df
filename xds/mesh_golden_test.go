package xds_test

import (
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// The mesh golden cases build their models by hand: they pin the
// translation of sidecar groups (ir.Sidecar) whatever the model builder
// derives them from. Each case is testdata/<case>/ like the others, and
// goes through the same checks (checkGoldenCase).

const (
	meshTD = "11111111-2222-3333-4444-555555555555.consul"
	meshDC = "dc1"
)

// meshCases are the hand-built cases by directory name.
var meshCases = map[string]func(t *testing.T) *ir.Model{
	"mesh_sidecar_tcp":     meshSidecarTCP,
	"mesh_sidecar_http_l7": meshSidecarHTTPL7,
	"mesh_upstreams":       meshUpstreams,
	"mesh_precedence":      meshPrecedence,
	"mesh_central":         meshCentral,
}

func TestMeshGolden(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(meshCases)) {
		t.Run(name, func(t *testing.T) {
			m := meshCases[name](t)
			if err := m.Validate(); err != nil {
				t.Fatalf("the case's model is invalid: %v", err)
			}
			checkGoldenCase(t, filepath.Join("testdata", name), m)
		})
	}
}

func meshEndpoint(addr string, port uint32) ir.Endpoint {
	return ir.Endpoint{Address: netip.MustParseAddr(addr), Port: port, Weight: 1}
}

// localCluster is a sidecar's cluster of its local application.
func localCluster(name string, port uint32, http2 bool) *ir.Cluster {
	return &ir.Cluster{Name: name, ConnectTimeout: 5 * time.Second, HTTP2: http2, Endpoints: []ir.Endpoint{meshEndpoint("127.0.0.1", port)}}
}

// meshCluster is the mesh cluster of service's sidecars as the sidecars
// of caller dial it.
func meshCluster(service, caller string, http2 bool, eps ...ir.Endpoint) *ir.Cluster {
	name := ir.MeshClusterName(service, meshDC, meshTD)
	return &ir.Cluster{
		Name: name, Service: service, ConnectTimeout: 5 * time.Second, HTTP2: http2,
		TLS: &ir.UpstreamTLS{
			SNI:               name,
			CertificateSecret: ir.LeafSecretPrefix + caller,
			CASecret:          ir.RootsSecretName,
			MatchURISANs:      []string{ir.SPIFFEID(meshTD, meshDC, service)},
		},
		Endpoints: eps,
	}
}

func sortModel(m *ir.Model) *ir.Model {
	slices.SortFunc(m.Clusters, func(a, b *ir.Cluster) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(m.Groups, func(a, b ir.Group) int { return strings.Compare(a.Name, b.Name) })
	for i := range m.Groups {
		slices.Sort(m.Groups[i].Clusters)
	}
	return m
}

func sidecarGroup(node, proxyID string, s ir.Sidecar, clusters ...string) ir.Group {
	s.ProxyID, s.Node, s.Datacenter = proxyID, node, meshDC
	return ir.Group{Name: ir.SidecarGroupName(node, proxyID), Sidecar: &s, Clusters: clusters}
}

// meshSidecarTCP: a TCP service's sidecar, default deny, one caller
// allowed: network RBAC before tcp_proxy.
func meshSidecarTCP(*testing.T) *ir.Model {
	return sortModel(&ir.Model{
		Mesh:     &ir.Mesh{TrustDomain: meshTD},
		Clusters: []*ir.Cluster{localCluster("local_app:db-sidecar-proxy", 5432, false)},
		Groups: []ir.Group{sidecarGroup("node-1", "db-sidecar-proxy", ir.Sidecar{
			Service: "db", Address: "10.0.0.5", Port: 21000, LocalCluster: "local_app:db-sidecar-proxy", Protocol: "tcp",
			Intentions: ir.Intentions{Default: ir.IntentionDeny, Rules: []ir.IntentionRule{
				{Source: "api", Action: ir.IntentionAllow, Precedence: 9},
				{Source: "*", Action: ir.IntentionDeny, Precedence: 8},
			}},
		}, "local_app:db-sidecar-proxy")},
	})
}

// meshSidecarHTTPL7: an HTTP service's sidecar with L7 permissions for
// one caller, an L4 deny for another, default allow: HTTP RBAC (DENY
// policies) first in the HTTP filters, an RDS route to the local app.
func meshSidecarHTTPL7(*testing.T) *ir.Model {
	return sortModel(&ir.Model{
		Mesh:     &ir.Mesh{TrustDomain: meshTD},
		Clusters: []*ir.Cluster{localCluster("local_app:api-sidecar-proxy", 8080, false)},
		Groups: []ir.Group{sidecarGroup("node-2", "api-sidecar-proxy", ir.Sidecar{
			Service: "api", Port: 21000, LocalCluster: "local_app:api-sidecar-proxy", Protocol: "http",
			Intentions: ir.Intentions{Default: ir.IntentionAllow, Rules: []ir.IntentionRule{
				{Source: "ops", Action: ir.IntentionDeny, Precedence: 9},
				{Source: "web", Precedence: 9, Permissions: []ir.IntentionPermission{
					{Action: ir.IntentionAllow, PathPrefix: "/admin/health"},
					{Action: ir.IntentionDeny, PathPrefix: "/admin"},
					{Action: ir.IntentionDeny, PathRegex: "/v1/users/[0-9]+", Methods: []string{"DELETE", "PUT"}},
					{Action: ir.IntentionDeny, Headers: []ir.IntentionHeader{
						{Name: "x-debug", Present: true},
						{Name: "x-team", Exact: "Red", IgnoreCase: true, Invert: true},
					}},
				}},
			}},
		}, "local_app:api-sidecar-proxy")},
	})
}

// meshUpstreams: web's sidecar (grpc, so no client-certificate header)
// with a tcp upstream, an HTTP upstream with the policy's routes and an
// HTTP upstream with the default route; the mesh clusters check the
// upstreams' SPIFFE ids.
func meshUpstreams(*testing.T) *ir.Model {
	db := meshCluster("db", "web", false, meshEndpoint("10.0.0.5", 21000))
	api := meshCluster("api", "web", false, meshEndpoint("10.0.0.6", 21000), meshEndpoint("10.0.0.7", 21000))
	apiCanary := meshCluster("api-canary", "web", false, meshEndpoint("10.0.0.8", 21000))
	search := meshCluster("search", "web", true, meshEndpoint("10.0.0.9", 21001))
	return sortModel(&ir.Model{
		Mesh:     &ir.Mesh{TrustDomain: meshTD},
		Clusters: []*ir.Cluster{localCluster("local_app:web-sidecar-proxy", 8443, true), db, api, apiCanary, search},
		Groups: []ir.Group{sidecarGroup("node-3", "web-sidecar-proxy", ir.Sidecar{
			Service: "web", Address: "10.0.0.3", Port: 21000, LocalCluster: "local_app:web-sidecar-proxy", Protocol: "grpc",
			LocalAddress: "127.0.0.1", LocalPort: 8443,
			Intentions: ir.Intentions{Default: ir.IntentionDeny, Rules: []ir.IntentionRule{{Source: "*", Action: ir.IntentionAllow, Precedence: 8}}},
			Upstreams: []ir.MeshUpstream{
				{Service: "db", BindPort: 15432, Protocol: "tcp", Cluster: db.Name},
				{Service: "api", BindAddress: "127.0.0.2", BindPort: 19090, Protocol: "http", Cluster: api.Name, Routes: []ir.Route{
					{
						Name: "api/0", Source: "policy.hcl:12:7",
						Match:    ir.RouteMatch{PathPrefix: "/v2/"},
						Clusters: []ir.WeightedCluster{{Name: api.Name, Weight: 90}, {Name: apiCanary.Name, Weight: 10}},
						Timeout:  3 * time.Second,
						Retry:    &ir.Retry{Attempts: 3, On: []string{"5xx", "connect-failure"}},
					},
					{Name: "api/1", Source: "policy.hcl:20:7", Clusters: []ir.WeightedCluster{{Name: api.Name, Weight: 1}}},
				}},
				{Service: "search", BindPort: 19191, Protocol: "grpc", Cluster: search.Name},
			},
		}, "local_app:web-sidecar-proxy", db.Name, api.Name, apiCanary.Name, search.Name)},
	})
}

// meshPrecedence: the same callers under four sidecars whose rules and
// defaults differ, one RBAC each.
func meshPrecedence(*testing.T) *ir.Model {
	m := &ir.Model{Mesh: &ir.Mesh{TrustDomain: meshTD}}
	add := func(service string, in ir.Intentions) {
		proxy := service + "-sidecar-proxy"
		local := "local_app:" + proxy
		m.Clusters = append(m.Clusters, localCluster(local, 9000, false))
		m.Groups = append(m.Groups, sidecarGroup("node-4", proxy, ir.Sidecar{
			Service: service, Port: 21000, LocalCluster: local, Protocol: "tcp", Intentions: in,
		}, local))
	}
	allow, deny := ir.IntentionAllow, ir.IntentionDeny
	// Exact deny over wildcard allow, default deny: an ALLOW RBAC of
	// "* AND NOT web".
	add("alpha", ir.Intentions{Default: deny, Rules: []ir.IntentionRule{{Source: "web", Action: deny, Precedence: 9}, {Source: "*", Action: allow, Precedence: 8}}})
	// Exact allow over wildcard deny, default allow: a DENY RBAC of
	// "* AND NOT ops".
	add("bravo", ir.Intentions{Default: allow, Rules: []ir.IntentionRule{{Source: "ops", Action: allow, Precedence: 9}, {Source: "*", Action: deny, Precedence: 8}}})
	// A wildcard of the destination's own entry over an exact source of
	// the wildcard entry: web is shadowed, nothing is denied.
	add("charlie", ir.Intentions{Default: allow, Rules: []ir.IntentionRule{{Source: "*", Action: allow, Precedence: 8}, {Source: "web", Action: deny, Precedence: 6}}})
	// No intentions: default deny lets nobody in, default allow everyone.
	add("delta", ir.Intentions{Default: deny})
	add("echo", ir.Intentions{Default: allow})
	return sortModel(m)
}

// meshCentral: the bridge serves web's leaf and the roots to web's
// sidecar group (and only there); listeners and clusters name them.
func meshCentral(t *testing.T) *ir.Model {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", "mesh_central", "tls", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	api := meshCluster("api", "web", false, meshEndpoint("10.0.0.6", 21000))
	g := sidecarGroup("node-5", "web-sidecar-proxy", ir.Sidecar{
		Service: "web", Port: 21000, LocalCluster: "local_app:web-sidecar-proxy", Protocol: "http",
		Intentions: ir.Intentions{Default: ir.IntentionDeny, Rules: []ir.IntentionRule{{Source: "edge", Action: ir.IntentionAllow, Precedence: 9}}},
		Upstreams:  []ir.MeshUpstream{{Service: "api", BindPort: 19090, Protocol: "http", Cluster: api.Name}},
	}, "local_app:web-sidecar-proxy", api.Name)
	g.Secrets = []ir.Secret{
		{Name: ir.LeafSecretPrefix + "web", CertificateChain: read("web.pem"), PrivateKey: read("web-key.pem")},
		{Name: ir.RootsSecretName, TrustedCA: read("roots.pem")},
	}
	return sortModel(&ir.Model{
		Mesh:     &ir.Mesh{TrustDomain: meshTD, Central: true},
		Clusters: []*ir.Cluster{localCluster("local_app:web-sidecar-proxy", 8080, false), api},
		Groups:   []ir.Group{g},
	})
}
