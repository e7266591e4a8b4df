package model

import (
	"slices"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// failoverPolicy fails api over to api-backup (mesh and edge).
const failoverPolicy = "mesh {}\nservice \"api\" {\n  failover {\n    service = \"api-backup\"\n  }\n}\n"

// failoverCatalog is meshCatalog with api-backup (one instance and its
// sidecar) and a second dialer of api (admin's sidecar).
func failoverCatalog() *consul.Catalog {
	cat := meshCatalog(consul.StatusPassing, consul.StatusPassing)
	backup := consul.Instance{ID: "api-backup-1", Node: "vm-c", Datacenter: "dc1", Address: "10.0.0.3", Port: 81, Status: consul.StatusPassing}
	cat = consul.NewCatalog(append(slices.Clone(cat.Services), &consul.Service{Name: "api-backup", Instances: []consul.Instance{backup}}))
	mesh := meshCatalog(consul.StatusPassing, consul.StatusPassing).Mesh
	mesh.Proxies = append(mesh.Proxies,
		consul.Proxy{ID: "api-backup-sidecar-proxy", Node: "vm-c", Datacenter: "dc1", Address: "10.0.0.3", Port: 21003, Service: "api-backup", ServiceID: "api-backup-1", LocalPort: 81, Status: consul.StatusPassing},
		consul.Proxy{ID: "admin-sidecar-proxy", Node: "vm-b", Datacenter: "dc1", Address: "10.0.0.2", Port: 21002, Service: "admin", LocalPort: 80, Status: consul.StatusPassing,
			Upstreams: []consul.Upstream{{Service: "api", BindPort: 9191}}})
	mesh.Leaves["admin"] = consul.Leaf{CertPEM: "ADMINCERT", KeyPEM: ir.Redacted("ADMINKEY")}
	cat.Mesh = mesh
	return cat
}

// TestMeshFailoverAggregate: api's mesh cluster fails over as an
// aggregate over failover-target~ clusters; with two dialing services
// (web and admin, each presenting its own leaf) each gets its own copy
// of the aggregate and of each target, and its sidecar group holds the
// aggregate and both targets; the edge cluster api takes api-backup's
// instances at priority 1; the mesh watcher reads api-backup.
func TestMeshFailoverAggregate(t *testing.T) {
	pol := meshPolicy(t, failoverPolicy)
	m, warnings := Build(failoverCatalog(), pol)
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	base, backup := ir.MeshClusterName("api", "dc1", td), ir.MeshClusterName("api-backup", "dc1", td)
	for _, local := range []string{"web", "admin"} {
		agg := m.Cluster(base + "/" + local)
		if agg == nil {
			t.Fatalf("no aggregate %s/%s; clusters %v, warnings %q", base, local, clusterNames(m), warnings)
		}
		members := []string{ir.FailoverTargetPrefix + base + "/" + local, ir.FailoverTargetPrefix + backup + "/" + local}
		if !slices.Equal(agg.Aggregate, members) || len(agg.Endpoints) != 0 || agg.TLS != nil {
			t.Errorf("%s: aggregate %v, endpoints %v, TLS %v; want %v, none, none", agg.Name, agg.Aggregate, agg.Endpoints, agg.TLS, members)
		}
		b := m.Cluster(members[1])
		if b == nil || b.TLS.SNI != backup || b.TLS.CertificateSecret != ir.LeafSecretPrefix+local ||
			!slices.Equal(b.TLS.MatchURISANs, []string{ir.SPIFFEID(td, "dc1", "api-backup")}) || len(b.Endpoints) != 1 || b.Endpoints[0].Port != 21003 {
			t.Errorf("%s: %+v; want api-backup's sidecar, SNI %s, SAN api-backup, %s's leaf", members[1], b, backup, local)
		}
		gname := ir.SidecarGroupName(map[string]string{"web": "vm-a", "admin": "vm-b"}[local], local+"-sidecar-proxy")
		i := slices.IndexFunc(m.Groups, func(g ir.Group) bool { return g.Name == gname })
		for _, n := range append(members, agg.Name) {
			if i < 0 || !slices.Contains(m.Groups[i].Clusters, n) {
				t.Errorf("%s's sidecar group lacks %s", local, n)
			}
		}
	}
	var prios []uint32
	for _, e := range m.Cluster("api").Endpoints {
		prios = append(prios, e.Priority)
	}
	if want := []uint32{0, 0, 1}; !slices.Equal(prios, want) {
		t.Errorf("edge cluster api priorities %v, want %v (api's two instances, then api-backup's)", prios, want)
	}
	if !slices.Contains(MeshWatchTargets(pol), consul.ServiceKey{Name: "api-backup"}) || !slices.Contains(WatchTargets(pol).Services, consul.ServiceKey{Name: "api-backup"}) {
		t.Errorf("api-backup is not watched: mesh %v, catalog %v", MeshWatchTargets(pol), WatchTargets(pol).Services)
	}
}
