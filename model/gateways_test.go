package model

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// gatewayCatalog is meshCatalog plus two external services (ext1: one
// passing and one critical instance; ext2), a terminating gateway "tgw"
// on vm-c linking both (ext2 with TLS files), web's sidecar dialing ext1
// through it, and intentions for ext1: web allowed, ops denied.
func gatewayCatalog() *consul.Catalog {
	cat := meshCatalog(consul.StatusPassing, consul.StatusPassing)
	ext := func(id string, port int, st consul.Status) consul.Instance {
		return consul.Instance{ID: id, Node: "external", Datacenter: "dc1", Address: "192.0.2.9", Port: port, Status: st}
	}
	mesh := *cat.Mesh
	cat = consul.NewCatalog(append(slices.Clone(cat.Services),
		&consul.Service{Name: "ext1", Instances: []consul.Instance{ext("ext1-a", 5432, consul.StatusPassing), ext("ext1-b", 5433, consul.StatusCritical)}},
		&consul.Service{Name: "ext2", Instances: []consul.Instance{ext("ext2", 6443, consul.StatusPassing)}},
	))
	mesh.Proxies = append(slices.Clone(mesh.Proxies), consul.Proxy{Kind: consul.KindTerminatingGateway, ID: "tgw-1", Name: "tgw", Node: "vm-c", Datacenter: "dc1", Address: "10.0.0.3", Port: 9443, Status: consul.StatusPassing})
	mesh.Proxies[1].Upstreams = append(slices.Clone(mesh.Proxies[1].Upstreams), consul.Upstream{Service: "ext1", BindPort: 9192})
	// What /v1/health/connect answers: api's sidecars; for ext1, the
	// gateway that fronts it.
	mesh.Endpoints = map[string][]consul.Proxy{"api": {mesh.Proxies[0], mesh.Proxies[2]}, "ext1": {mesh.Proxies[3]}}
	mesh.TerminatingGateways = map[string][]consul.LinkedService{"tgw": {
		{Name: "ext1"},
		{Name: "ext2", CAFile: "/etc/tgw/ca.pem", CertFile: "/etc/tgw/cert.pem", KeyFile: "/etc/tgw/key.pem", SNI: "ext2.example.com"},
	}}
	mesh.Intentions = []*api.ServiceIntentionsConfigEntry{{Kind: api.ServiceIntentions, Name: "ext1", Sources: []*api.SourceIntention{
		{Name: "web", Action: api.IntentionActionAllow}, {Name: "ops", Action: api.IntentionActionDeny},
	}}}
	mesh.Leaves = map[string]consul.Leaf{
		"web": mesh.Leaves["web"], "api": mesh.Leaves["api"],
		"ext1": {CertPEM: "EXT1CERT", KeyPEM: ir.Redacted("EXT1KEY")}, "ext2": {CertPEM: "EXT2CERT", KeyPEM: ir.Redacted("EXT2KEY")},
	}
	cat.Mesh = &mesh
	return cat
}

func gatewayGroup(t *testing.T, m *ir.Model, name string) *ir.Group {
	t.Helper()
	g := groupNamed(m, name)
	if g == nil || g.Gateway == nil {
		t.Fatalf("no gateway group %q", name)
	}
	return g
}

// TestTerminatingGatewayGroup: the gateway is the group of its service id
// on its node, with one chain per linked service, matched by that
// service's mesh SNI (Consul's name), presenting that service's leaf and
// enforcing that service's intentions; its clusters are the external
// instances with the entry's TLS files, and do not take the name of web's
// cluster of ext1 (whose endpoints are the gateway).
func TestTerminatingGatewayGroup(t *testing.T) {
	m, warns := Build(gatewayCatalog(), meshPolicy(t, "mesh {}\n"))
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	g := gatewayGroup(t, m, ir.SidecarGroupName("vm-c", "tgw-1"))
	gw := g.Gateway
	if gw == nil || gw.Kind != ir.GatewayTerminating || gw.Port != 9443 || gw.Address != "0.0.0.0" || gw.Service != "tgw" {
		t.Fatalf("gateway %+v", gw)
	}
	sni1, sni2 := ir.MeshClusterName("ext1", "dc1", td), ir.MeshClusterName("ext2", "dc1", td)
	if len(gw.Chains) != 2 || gw.Chains[0].SNI != sni1 || gw.Chains[1].SNI != sni2 {
		t.Fatalf("chains %+v", gw.Chains)
	}
	c1, c2 := gw.Chains[0], gw.Chains[1]
	if c1.CertificateSecret != ir.LeafSecretPrefix+"ext1" || c2.CertificateSecret != ir.LeafSecretPrefix+"ext2" {
		t.Errorf("chain certificates %q %q: each chain presents its own service's leaf", c1.CertificateSecret, c2.CertificateSecret)
	}
	if len(c1.Intentions.Rules) != 2 || c1.Intentions.Rules[0].Source != "web" && c1.Intentions.Rules[1].Source != "web" || len(c2.Intentions.Rules) != 0 {
		t.Errorf("intentions: ext1 %+v, ext2 %+v", c1.Intentions, c2.Intentions)
	}
	// web's sidecar dials ext1 through the gateway under Consul's name;
	// the gateway's own cluster of ext1 is qualified by the gateway.
	if c1.Cluster != sni1+"/tgw" || c2.Cluster != sni2 {
		t.Errorf("gateway clusters %q %q", c1.Cluster, c2.Cluster)
	}
	if web := m.Cluster(sni1); web == nil || len(web.Endpoints) != 1 || web.Endpoints[0].Address.String() != "10.0.0.3" || web.Endpoints[0].Port != 9443 || web.Endpoints[0].Health != ir.Healthy {
		t.Errorf("web's cluster of ext1 must reach the gateway, healthy: %+v", web)
	}
	if !slices.Equal(g.Clusters, []string{sni1 + "/tgw", sni2}) {
		t.Errorf("group clusters %v", g.Clusters)
	}
	ext1 := m.Cluster(sni1 + "/tgw")
	if ext1 == nil || ext1.TLS != nil || len(ext1.Endpoints) != 2 || ext1.Endpoints[0].Health != ir.Healthy || ext1.Endpoints[1].Health != ir.Unhealthy {
		t.Errorf("ext1 cluster %+v", ext1)
	}
	ext2 := m.Cluster(sni2)
	if ext2 == nil || ext2.TLS == nil || *ext2.TLS.Files != (ir.TLSFiles{CA: "/etc/tgw/ca.pem", Cert: "/etc/tgw/cert.pem", Key: "/etc/tgw/key.pem"}) || ext2.TLS.SNI != "ext2.example.com" {
		t.Errorf("ext2 cluster %+v", ext2)
	}
	if len(g.Secrets) != 0 {
		t.Errorf("agent mode: the gateway group holds secrets %v", g.Secrets)
	}
	if !m.SidecarClusters()[sni2] {
		t.Error("a gateway's cluster (TLS files on the gateway's host) may be handed to other proxies")
	}
	if len(warns) != 0 {
		t.Errorf("warnings: %q", warns)
	}
}

// TestTerminatingGatewayKeys: in central mode the gateway's group holds
// the leaves of the services it links (and the roots), no other; no
// sidecar gets a linked service's leaf; a linked service whose leaf has
// not been read gets no chain (and a warning) rather than a chain
// waiting for a certificate.
func TestTerminatingGatewayKeys(t *testing.T) {
	cat := gatewayCatalog()
	pol := meshPolicy(t, "mesh {\n  mode = \"central\"\n}\n")
	m, _ := Build(cat, pol)
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	names := func(ss []ir.Secret) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Name)
		}
		return out
	}
	g := gatewayGroup(t, m, ir.SidecarGroupName("vm-c", "tgw-1"))
	if got, want := names(g.Secrets), []string{ir.LeafSecretPrefix + "ext1", ir.LeafSecretPrefix + "ext2", ir.RootsSecretName}; !slices.Equal(got, want) {
		t.Errorf("gateway secrets %v, want %v", got, want)
	}
	for _, sg := range m.Groups {
		if sg.Gateway != nil {
			continue
		}
		for _, s := range sg.Secrets {
			if strings.HasPrefix(s.Name, ir.LeafSecretPrefix+"ext") {
				t.Errorf("group %q holds %q", sg.Name, s.Name)
			}
		}
	}
	mesh := *cat.Mesh
	mesh.Leaves = map[string]consul.Leaf{"web": mesh.Leaves["web"], "api": mesh.Leaves["api"], "ext2": mesh.Leaves["ext2"]}
	cat.Mesh = &mesh
	m, warns := Build(cat, pol)
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	g = gatewayGroup(t, m, ir.SidecarGroupName("vm-c", "tgw-1"))
	if len(g.Gateway.Chains) != 1 || g.Gateway.Chains[0].Service != "ext2" {
		t.Errorf("chains without ext1's leaf: %+v", g.Gateway.Chains)
	}
	if got, want := names(g.Secrets), []string{ir.LeafSecretPrefix + "ext2", ir.RootsSecretName}; !slices.Equal(got, want) {
		t.Errorf("gateway secrets %v, want %v", got, want)
	}
	if !slices.ContainsFunc(warns, func(w string) bool { return strings.Contains(w, `no leaf certificate of "ext1"`) }) {
		t.Errorf("no warning of ext1's missing leaf: %q", warns)
	}
}

// TestTerminatingGatewayWildcard: a wildcard link Consul's expansion has
// not replaced yet (consul/wildcard.go) is warned about and serves nothing.
func TestTerminatingGatewayWildcard(t *testing.T) {
	cat := gatewayCatalog()
	mesh := *cat.Mesh
	// What /v1/health/connect answers: api's sidecars; for ext1, the
	// gateway that fronts it.
	mesh.Endpoints = map[string][]consul.Proxy{"api": {mesh.Proxies[0], mesh.Proxies[2]}, "ext1": {mesh.Proxies[3]}}
	mesh.TerminatingGateways = map[string][]consul.LinkedService{"tgw": {{Name: "*"}}}
	cat.Mesh = &mesh
	m, warns := Build(cat, meshPolicy(t, "mesh {}\n"))
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if g := gatewayGroup(t, m, ir.SidecarGroupName("vm-c", "tgw-1")); len(g.Gateway.Chains) != 0 {
		t.Errorf("chains %+v", g.Gateway.Chains)
	}
	if !slices.ContainsFunc(warns, func(w string) bool { return strings.Contains(w, "wildcard") }) {
		t.Errorf("no warning of the wildcard: %q", warns)
	}
}

// TestMeshGatewayGroup: a mesh gateway is the group of its service id,
// with one passthrough chain per local service with Connect instances
// (matched by its mesh SNI) to a cluster of those instances, plain TCP
// (the caller's TLS passes through): sidecars, or for ext1 the
// terminating gateway that fronts it; none for ext2, whose Connect
// instances were not read. It holds no key, even in central mode.
func TestMeshGatewayGroup(t *testing.T) {
	cat := gatewayCatalog()
	mesh := *cat.Mesh
	// With a mesh gateway the watcher reads every local service's
	// Connect endpoints (consul.Mesh.TransparentTargets).
	mesh.Endpoints = maps.Clone(mesh.Endpoints)
	mesh.Endpoints["web"] = []consul.Proxy{mesh.Proxies[1]}
	mesh.Proxies = append(slices.Clone(mesh.Proxies), consul.Proxy{Kind: consul.KindMeshGateway, ID: "mgw-1", Name: "mgw", Node: "vm-d", Datacenter: "dc1", Address: "10.0.0.4", ServiceAddress: "10.0.0.4", Port: 8443, Status: consul.StatusPassing})
	cat.Mesh = &mesh
	m, _ := Build(cat, meshPolicy(t, "mesh {\n  mode = \"central\"\n}\n"))
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	g := gatewayGroup(t, m, ir.SidecarGroupName("vm-d", "mgw-1"))
	gw := g.Gateway
	if gw.Kind != ir.GatewayMesh || gw.Address != "10.0.0.4" || gw.Port != 8443 {
		t.Fatalf("gateway %+v", gw)
	}
	api, ext1, web := ir.MeshClusterName("api", "dc1", td), ir.MeshClusterName("ext1", "dc1", td), ir.MeshClusterName("web", "dc1", td)
	if len(gw.Chains) != 3 || gw.Chains[0].SNI != api || gw.Chains[1].SNI != ext1 || gw.Chains[2].SNI != web {
		t.Fatalf("chains %+v", gw.Chains)
	}
	// web's sidecar holds api's and ext1's names (its mTLS clusters);
	// web's is free.
	if gw.Chains[0].Cluster != api+"/mgw" || gw.Chains[1].Cluster != ext1+"/mgw" || gw.Chains[2].Cluster != web {
		t.Errorf("clusters %q %q %q", gw.Chains[0].Cluster, gw.Chains[1].Cluster, gw.Chains[2].Cluster)
	}
	for _, c := range gw.Chains {
		if c.CertificateSecret != "" || len(c.Intentions.Rules) != 0 {
			t.Errorf("mesh gateway chain %s terminates TLS or checks intentions: %+v", c.Service, c)
		}
		cl := m.Cluster(c.Cluster)
		if cl == nil || cl.TLS != nil {
			t.Fatalf("cluster %q: %+v", c.Cluster, cl)
		}
		var got []string
		for _, ep := range cl.Endpoints {
			got = append(got, ep.Address.String())
		}
		want := map[string][]string{"api": {"10.0.0.1", "10.0.0.2"}, "ext1": {"10.0.0.3"}, "web": {"10.0.0.1"}}[c.Service]
		if slices.Sort(got); !slices.Equal(got, want) {
			t.Errorf("%s endpoints %v, want its sidecars %v", c.Service, got, want)
		}
	}
	if len(g.Secrets) != 0 {
		t.Errorf("mesh gateway holds secrets %v", g.Secrets)
	}
}
