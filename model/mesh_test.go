package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/policytest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

const td = "11111111-2222-3333-4444-555555555555.consul"

func meshPolicy(t *testing.T, src string) *policy.Policy {
	t.Helper()
	return policytest.Policy(t, src)
}

// meshCatalog: web (vm-a) dials api; api has a sidecar on vm-a and vm-b.
func meshCatalog(apiStatus, apiProxyStatus consul.Status) *consul.Catalog {
	inst := func(id, node string, st consul.Status) consul.Instance {
		return consul.Instance{ID: id, Node: node, Datacenter: "dc1", Address: "10.0.0.1", Port: 80, Status: st}
	}
	cat := consul.NewCatalog([]*consul.Service{
		{Name: "web", Instances: []consul.Instance{inst("web-1", "vm-a", consul.StatusPassing)}},
		{Name: "api", Instances: []consul.Instance{inst("api-1", "vm-a", apiStatus), inst("api-2", "vm-b", consul.StatusPassing)}},
	})
	proxy := func(node, id, svc, svcID string, port int, st consul.Status, up ...consul.Upstream) consul.Proxy {
		return consul.Proxy{ID: id, Name: id, Node: node, Datacenter: "dc1", Address: map[string]string{"vm-a": "10.0.0.1", "vm-b": "10.0.0.2"}[node], Port: port,
			Service: svc, ServiceID: svcID, LocalPort: 80, Status: st, Upstreams: up}
	}
	cat.Mesh = &consul.Mesh{
		TrustDomain: td, DefaultIntention: ir.IntentionAllow, RootsPEM: "ROOTS",
		Proxies: []consul.Proxy{
			proxy("vm-a", "api-sidecar-proxy", "api", "api-1", 21001, apiProxyStatus),
			proxy("vm-a", "web-sidecar-proxy", "web", "web-1", 21000, consul.StatusPassing, consul.Upstream{Service: "api", BindPort: 9191}),
			proxy("vm-b", "api-sidecar-proxy", "api", "api-2", 21001, consul.StatusPassing),
		},
		Leaves: map[string]consul.Leaf{"web": {CertPEM: "WEBCERT", KeyPEM: ir.Redacted("WEBKEY")}, "api": {CertPEM: "APICERT", KeyPEM: ir.Redacted("APIKEY")}},
	}
	return cat
}

// TestMeshEndpointHealth: a mesh endpoint (an upstream's sidecar) is
// healthy only when the proxy and the instance it fronts both pass.
func TestMeshEndpointHealth(t *testing.T) {
	for name, tc := range map[string]struct {
		app, proxy consul.Status
		want       ir.Health
	}{
		"both pass":          {consul.StatusPassing, consul.StatusPassing, ir.Healthy},
		"only the proxy":     {consul.StatusCritical, consul.StatusPassing, ir.Unhealthy},
		"only the app":       {consul.StatusPassing, consul.StatusCritical, ir.Unhealthy},
		"app in maintenance": {consul.StatusMaintenance, consul.StatusPassing, ir.Draining},
	} {
		t.Run(name, func(t *testing.T) {
			m, _ := Build(meshCatalog(tc.app, tc.proxy), meshPolicy(t, "mesh {}\n"))
			if err := m.Validate(); err != nil {
				t.Fatal(err)
			}
			c := m.Cluster(ir.MeshClusterName("api", "dc1", td))
			if c == nil {
				t.Fatalf("no mesh cluster; clusters: %s", clusterNames(m))
			}
			if len(c.Endpoints) != 2 || c.Endpoints[0].Port != 21001 {
				t.Fatalf("endpoints = %+v", c.Endpoints)
			}
			if got := c.Endpoints[0].Health; got != tc.want {
				t.Errorf("vm-a sidecar health = %v, want %v", got, tc.want)
			}
			if got := c.Endpoints[1].Health; got != ir.Healthy {
				t.Errorf("vm-b sidecar health = %v, want healthy", got)
			}
			if c.TLS == nil || c.TLS.SNI != c.Name || !slices.Equal(c.TLS.MatchURISANs, []string{"spiffe://" + td + "/ns/default/dc/dc1/svc/api"}) ||
				c.TLS.CertificateSecret != ir.LeafSecretPrefix+"web" || c.TLS.CASecret != ir.RootsSecretName {
				t.Errorf("TLS = %+v", c.TLS)
			}
		})
	}
}

// TestMeshGroups: one group per registered sidecar, reaching its local
// app and its upstreams only; leaves (central mode) only in their own
// sidecar's group; reserved names rejected.
func TestMeshGroups(t *testing.T) {
	pol := meshPolicy(t, "mesh {\n  mode = \"central\"\n}\nproxy \"web-envoys\" {\n  sidecar_for = \"web\"\n}\n")
	// The policy refuses the name; the model does not rely on it.
	pol.Proxies = append(pol.Proxies, &policy.Proxy{Name: "sidecar:x", Upstreams: []string{"api"}})
	m, warnings := Build(meshCatalog(consul.StatusPassing, consul.StatusPassing), pol)
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(warnings, "\n"), `"sidecar:x"`) {
		t.Errorf("no warning about the reserved group name: %q", warnings)
	}
	var names []string
	for _, g := range m.Groups {
		names = append(names, g.Name)
	}
	want := "sidecar:vm-a/api-sidecar-proxy sidecar:vm-a/web-sidecar-proxy sidecar:vm-b/api-sidecar-proxy web-envoys"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("groups = %s, want %s", got, want)
	}
	mc := ir.MeshClusterName("api", "dc1", td)
	for _, g := range m.Groups {
		sc := g.Sidecar
		if sc == nil {
			t.Fatalf("group %q has no sidecar", g.Name)
		}
		var secrets []string
		for _, s := range g.Secrets {
			secrets = append(secrets, s.Name)
		}
		if got, want := strings.Join(secrets, " "), ir.LeafSecretPrefix+sc.Service+" "+ir.RootsSecretName; got != want {
			t.Errorf("group %q secrets = %s, want %s", g.Name, got, want)
		}
		wantClusters := sc.LocalCluster
		if sc.Service == "web" {
			wantClusters = mc + " " + sc.LocalCluster
			if len(sc.Upstreams) != 1 || sc.Upstreams[0].Cluster != mc || sc.Upstreams[0].BindPort != 9191 || sc.Upstreams[0].BindAddress != "127.0.0.1" {
				t.Errorf("group %q upstreams = %+v", g.Name, sc.Upstreams)
			}
		}
		if got := strings.Join(g.Clusters, " "); got != wantClusters {
			t.Errorf("group %q clusters = %s, want %s", g.Name, got, wantClusters)
		}
		if lc := m.Cluster(sc.LocalCluster); lc == nil || len(lc.Endpoints) != 1 || lc.Endpoints[0].Port != 80 {
			t.Errorf("group %q local cluster = %+v", g.Name, lc)
		}
	}
	if m.Mesh == nil || !m.Mesh.Central || m.Mesh.TrustDomain != td {
		t.Errorf("mesh = %+v", m.Mesh)
	}
}

// TestMeshClusterPerDialer: sidecars of two services dialing one upstream
// present different leaves, so each gets a cluster of its own.
func TestMeshClusterPerDialer(t *testing.T) {
	cat := meshCatalog(consul.StatusPassing, consul.StatusPassing)
	cat.Mesh.Proxies = append(cat.Mesh.Proxies, consul.Proxy{ID: "admin-sidecar-proxy", Node: "vm-c", Datacenter: "dc1", Address: "10.0.0.3",
		Port: 21002, Service: "admin", LocalPort: 80, Status: consul.StatusPassing, Upstreams: []consul.Upstream{{Service: "api", BindPort: 9191}}})
	m, _ := Build(cat, meshPolicy(t, "mesh {}\n"))
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	mc := ir.MeshClusterName("api", "dc1", td)
	for _, svc := range []string{"web", "admin"} {
		c := m.Cluster(mc + "/" + svc)
		if c == nil || c.TLS.CertificateSecret != ir.LeafSecretPrefix+svc || c.TLS.SNI != mc {
			t.Errorf("cluster for %s = %+v", svc, c)
		}
	}
}

// TestMeshCentralWithoutLeaf: in central mode a sidecar whose leaf was
// not read is left out (with a warning), and the model stays valid for
// everyone else.
func TestMeshCentralWithoutLeaf(t *testing.T) {
	cat := meshCatalog(consul.StatusPassing, consul.StatusPassing)
	delete(cat.Mesh.Leaves, "web")
	m, warnings := Build(cat, meshPolicy(t, "mesh {\n  mode = \"central\"\n}\n"))
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, g := range m.Groups {
		if g.Sidecar != nil && g.Sidecar.Service == "web" {
			t.Errorf("group %q served without its leaf", g.Name)
		}
	}
	if !strings.Contains(strings.Join(warnings, "\n"), `no leaf certificate of "web"`) {
		t.Errorf("no warning: %q", warnings)
	}
}

// TestMeshNativeEndpoints: the upstream's endpoints are what its connect
// health lists, Connect-native instances included (healthy on their own
// checks: they are their own destination).
func TestMeshNativeEndpoints(t *testing.T) {
	cat := meshCatalog(consul.StatusPassing, consul.StatusPassing)
	cat.Mesh.Endpoints = map[string][]consul.Proxy{"api": {
		{ID: "api-native", Node: "vm-c", Datacenter: "dc1", Address: "10.0.0.3", Port: 8443, Service: "api", ServiceID: "api-native", Status: consul.StatusPassing, Native: true},
	}}
	m, _ := Build(cat, meshPolicy(t, "mesh {}\n"))
	c := m.Cluster(ir.MeshClusterName("api", "dc1", td))
	if c == nil || len(c.Endpoints) != 1 || c.Endpoints[0].Port != 8443 || c.Endpoints[0].Health != ir.Healthy {
		t.Fatalf("mesh cluster = %+v", c)
	}
}

// TestMeshRemoteUpstream: an upstream in another datacenter is Consul's
// cluster of that datacenter (name, SNI, SAN), with the endpoints its
// connect health there lists, healthy as their destinations there are.
func TestMeshRemoteUpstream(t *testing.T) {
	local := meshCatalog(consul.StatusPassing, consul.StatusPassing)
	cat := consul.NewCatalog(append(local.Services, &consul.Service{Name: "api", Datacenter: "dc2", Instances: []consul.Instance{
		{ID: "api-9", Node: "far", Datacenter: "dc2", Address: "10.9.0.1", Port: 9090, Status: consul.StatusPassing}}}))
	cat.Mesh = local.Mesh
	cat.Mesh.Proxies[1].Upstreams = []consul.Upstream{{Service: "api", Datacenter: "dc2", BindPort: 9292}}
	cat.Mesh.Endpoints = map[string][]consul.Proxy{"api@dc2": {
		{ID: "api-sidecar-proxy", Node: "far", Datacenter: "dc2", Address: "10.9.0.1", Port: 21001, Service: "api", ServiceID: "api-9", Status: consul.StatusPassing},
	}}
	m, _ := Build(cat, meshPolicy(t, "mesh {}\n"))
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	name := ir.MeshClusterName("api", "dc2", td)
	c := m.Cluster(name)
	if c == nil || c.TLS.SNI != name || !slices.Equal(c.TLS.MatchURISANs, []string{ir.SPIFFEID(td, "dc2", "api")}) {
		t.Fatalf("remote mesh cluster = %+v", c)
	}
	if len(c.Endpoints) != 1 || c.Endpoints[0].Port != 21001 || c.Endpoints[0].Health != ir.Healthy {
		t.Errorf("endpoints = %+v", c.Endpoints)
	}
}

// TestMeshFailover: a mesh cluster of a service whose policy fails over
// to other datacenters is, as in Consul 1.15, an aggregate over a
// failover-target~ cluster per datacenter in order, each with that
// datacenter's sidecars and SPIFFE id (a remote sidecar presents its own
// datacenter's); the watch targets include those reads.
func TestMeshFailover(t *testing.T) {
	local := meshCatalog(consul.StatusPassing, consul.StatusPassing)
	cat := consul.NewCatalog(append(local.Services, &consul.Service{Name: "api", Datacenter: "dc2", Instances: []consul.Instance{
		{ID: "api-9", Node: "far", Datacenter: "dc2", Address: "10.9.0.1", Port: 9090, Status: consul.StatusPassing}}}))
	cat.Mesh = local.Mesh
	far := consul.Proxy{ID: "api-sidecar-proxy", Node: "far", Datacenter: "dc2", Address: "10.9.0.1", Port: 21001, Service: "api", ServiceID: "api-9", Status: consul.StatusPassing}
	cat.Mesh.Endpoints = map[string][]consul.Proxy{"api": {cat.Mesh.Proxies[0], cat.Mesh.Proxies[2]}, "api@dc2": {far}}
	for name, hcl := range map[string]string{
		"block named as the service": "mesh {}\nservice \"api\" {\n  failover {\n    datacenters = [\"dc2\"]\n  }\n}\n",
		// Registrations name Consul services: a block with another name
		// for the same Consul service applies too.
		"block renaming the service": "mesh {}\nservice \"payments\" {\n  consul_service = \"api\"\n  failover {\n    datacenters = [\"dc2\"]\n  }\n}\n",
	} {
		t.Run(name, func(t *testing.T) { checkMeshFailover(t, cat, meshPolicy(t, hcl)) })
	}
}

func checkMeshFailover(t *testing.T, cat *consul.Catalog, pol *policy.Policy) {
	t.Helper()
	m, _ := Build(cat, pol)
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	c := m.Cluster(ir.MeshClusterName("api", "dc1", td))
	if c == nil {
		t.Fatal("no api mesh cluster")
	}
	dc1, dc2 := ir.FailoverTargetPrefix+ir.MeshClusterName("api", "dc1", td), ir.FailoverTargetPrefix+ir.MeshClusterName("api", "dc2", td)
	if !slices.Equal(c.Aggregate, []string{dc1, dc2}) || len(c.Endpoints) != 0 {
		t.Fatalf("api's cluster: aggregate %v with %d endpoints, want the aggregate over %s then %s", c.Aggregate, len(c.Endpoints), dc1, dc2)
	}
	for _, want := range []struct {
		name, dc string
		ports    []uint32
	}{{dc1, "dc1", []uint32{uint32(cat.Mesh.Proxies[0].Port), uint32(cat.Mesh.Proxies[2].Port)}}, {dc2, "dc2", []uint32{21001}}} {
		m := m.Cluster(want.name)
		if m == nil {
			t.Fatalf("no member %s", want.name)
		}
		var ports []uint32
		for _, e := range m.Endpoints {
			ports = append(ports, e.Port)
		}
		sni := want.name[len(ir.FailoverTargetPrefix):]
		if !slices.Equal(ports, want.ports) || m.TLS.SNI != sni || !slices.Equal(m.TLS.MatchURISANs, []string{ir.SPIFFEID(td, want.dc, "api")}) {
			t.Errorf("member %s: ports %v SNI %s SANs %v; want %v, %s, %s's SPIFFE id", want.name, ports, m.TLS.SNI, m.TLS.MatchURISANs, want.ports, sni, want.dc)
		}
	}
	if !slices.Contains(MeshWatchTargets(pol), consul.ServiceKey{Datacenter: "dc2", Name: "api"}) {
		t.Errorf("watch targets %v lack api in dc2", MeshWatchTargets(pol))
	}
}

// TestMeshDialersDisagreeOnHTTP2: one mesh cluster serves every dialer;
// dialers whose upstream protocols disagree on HTTP/2 get a warning that
// names the fix, rather than the first dialer's choice silently.
func TestMeshDialersDisagreeOnHTTP2(t *testing.T) {
	cat := meshCatalog(consul.StatusPassing, consul.StatusPassing)
	cat.Mesh.Proxies = append(cat.Mesh.Proxies, consul.Proxy{ID: "admin-sidecar-proxy", Node: "vm-c", Datacenter: "dc1", Address: "10.0.0.3",
		Port: 21002, Service: "admin", LocalPort: 80, Status: consul.StatusPassing, Upstreams: []consul.Upstream{{Service: "api", BindPort: 9191, Protocol: "http2"}}})
	_, warnings := Build(cat, meshPolicy(t, "mesh {}\n"))
	if !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "HTTP/2") && strings.Contains(w, "service-defaults") }) {
		t.Errorf("no warning about dialers disagreeing on HTTP/2: %q", warnings)
	}
	cat.Mesh.Proxies[len(cat.Mesh.Proxies)-1].Upstreams[0].Protocol = ""
	if _, warnings := Build(cat, meshPolicy(t, "mesh {}\n")); slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "HTTP/2") }) {
		t.Errorf("a warning although the dialers agree: %q", warnings)
	}
}
