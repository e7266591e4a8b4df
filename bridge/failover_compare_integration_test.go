package bridge_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestMeshFailoverMatchesConsulXDS (issue 39): service-resolver failovers
// to another subset (api's v1 to v2), to another service (api's other
// subsets to api-backup) and by Targets (db to db-backup) reach web's
// sidecar through the bridge as through Consul 1.15.4's own xDS server:
// each failing target's cluster an aggregate over failover-target~
// clusters in the same order, each of those with its target's SNI,
// SPIFFE id, connect timeout and endpoints (its target's sidecars only).
// Any other difference fails the test.
func TestMeshFailoverMatchesConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	registerServices(t, agent,
		webWithUpstreams(api.Upstream{DestinationName: "api", LocalBindPort: 9191}, api.Upstream{DestinationName: "db", LocalBindPort: 9192}),
		&api.AgentServiceRegistration{Name: "api", ID: "api-1", Port: 9090, Tags: []string{"v1"}, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "api", ID: "api-2", Port: 9092, Tags: []string{"v2"}, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "api-backup", Port: 9093, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "db", Port: 5432, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "db-backup", Port: 5433, Connect: withSidecar()})
	writeEntries(t, agent,
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api-backup", Protocol: "http"},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", DefaultSubset: "v1", ConnectTimeout: 3 * time.Second,
			LoadBalancer: &api.LoadBalancer{Policy: "least_request"},
			Subsets:      map[string]api.ServiceResolverSubset{"v1": {Filter: `"v1" in Service.Tags`}, "v2": {Filter: `"v2" in Service.Tags`}},
			Failover:     map[string]api.ServiceResolverFailover{"v1": {ServiceSubset: "v2"}, "*": {Service: "api-backup"}}},
		// v2 is reached too (by header), so its "*" failover is served.
		&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "api", Routes: []api.ServiceRoute{{
			Match:       &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{Header: []api.ServiceRouteHTTPMatchHeader{{Name: "x-canary", Exact: "1"}}}},
			Destination: &api.ServiceRouteDestination{ServiceSubset: "v2"},
		}}},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "db",
			Failover: map[string]api.ServiceResolverFailover{"*": {Targets: []api.ServiceResolverFailoverTarget{{Service: "db-backup"}}}}})
	h := startEntriesBridge(t, agent, "mesh {}\n")
	td := trustDomain(t, agent)
	v1, v2 := ir.MeshSubsetClusterName("v1", "api", "dc1", td), ir.MeshSubsetClusterName("v2", "api", "dc1", td)
	backup, db, dbBackup := ir.MeshClusterName("api-backup", "dc1", td), ir.MeshClusterName("db", "dc1", td), ir.MeshClusterName("db-backup", "dc1", td)
	ft := func(n string) string { return ir.FailoverTargetPrefix + n }
	wantClusters := slices.Sorted(slices.Values([]string{v1, v2, db, ft(v1), ft(v2), ft(backup), ft(db), ft(dbBackup)}))
	// Each failover target's endpoints are its own target's sidecars.
	wantEndpoints := map[string][]string{
		ft(v1):       {apiSidecarAddr(t, agent, "api-1-sidecar-proxy")},
		ft(v2):       {apiSidecarAddr(t, agent, "api-2-sidecar-proxy")},
		ft(backup):   {sidecarAddr(t, agent, "api-backup-sidecar-proxy")},
		ft(db):       {sidecarAddr(t, agent, "db-sidecar-proxy")},
		ft(dbBackup): {sidecarAddr(t, agent, "db-backup-sidecar-proxy")},
	}
	ready := func(s adsclient.State) bool {
		v := chainViewOf(s)
		for n := range wantEndpoints {
			if len(v.endpoints[n]) == 0 {
				return false
			}
		}
		return len(v.routes) >= 2 && slices.Equal(meshClusterNames(s), wantClusters)
	}
	consul := chainViewOf(webSidecarState(t, agent.GRPCAddr(), ready))
	ours := chainViewOf(webSidecarState(t, h.daemon.XDSAddr().String(), ready))
	sameChain(t, consul, ours, wantEndpoints)
	for _, agg := range []string{v1, v2, db} {
		if len(ours.endpoints[agg]) != 0 {
			t.Errorf("aggregate cluster %s has endpoints of its own: %v", agg, ours.endpoints[agg])
		}
	}
}

// TestMeshTCPResolverMatchesConsulXDS (issue 39): a TCP service's
// resolver applies to its sidecars' upstreams as in Consul, though
// routers and splitters do not: db's default subset (v1) and cache's
// redirect (to cache-new) give web's sidecar the same tcp_proxy
// clusters, cluster settings and endpoints from the bridge as from
// Consul 1.15.4's own xDS server.
func TestMeshTCPResolverMatchesConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	registerServices(t, agent,
		webWithUpstreams(api.Upstream{DestinationName: "db", LocalBindPort: 9192}, api.Upstream{DestinationName: "cache", LocalBindPort: 9193}),
		&api.AgentServiceRegistration{Name: "db", ID: "db-1", Port: 5432, Tags: []string{"v1"}, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "db", ID: "db-2", Port: 5433, Tags: []string{"v2"}, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "cache", Port: 6379, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "cache-new", Port: 6380, Connect: withSidecar()})
	writeEntries(t, agent,
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "db", DefaultSubset: "v1",
			Subsets: map[string]api.ServiceResolverSubset{"v1": {Filter: `"v1" in Service.Tags`}, "v2": {Filter: `"v2" in Service.Tags`}}},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "cache", Redirect: &api.ServiceResolverRedirect{Service: "cache-new"}})
	h := startEntriesBridge(t, agent, "mesh {}\n")
	td := trustDomain(t, agent)
	v1, cacheNew := ir.MeshSubsetClusterName("v1", "db", "dc1", td), ir.MeshClusterName("cache-new", "dc1", td)
	wantEndpoints := map[string][]string{v1: {instanceSidecarAddr(t, agent, "db", "db-1-sidecar-proxy")}, cacheNew: {sidecarAddr(t, agent, "cache-new-sidecar-proxy")}}
	ready := func(s adsclient.State) bool {
		v := chainViewOf(s)
		return len(v.endpoints[v1]) > 0 && len(v.endpoints[cacheNew]) > 0 && slices.Equal(meshClusterNames(s), []string{cacheNew, v1}) &&
			len(tcpDialed(s)) == 2
	}
	cst := webSidecarState(t, agent.GRPCAddr(), ready)
	ost := webSidecarState(t, h.daemon.XDSAddr().String(), ready)
	consul, consulDialed := chainViewOf(cst), tcpDialed(cst)
	ours, ourDialed := chainViewOf(ost), tcpDialed(ost)
	t.Logf("Consul: %+v dials %v", consul, consulDialed)
	t.Logf("bridge: %+v dials %v", ours, ourDialed)
	if want := []string{cacheNew, v1}; !slices.Equal(consulDialed, want) {
		t.Fatalf("Consul's own sidecar dials %v, want %v: the reference changed", consulDialed, want)
	}
	if !slices.Equal(consulDialed, ourDialed) {
		t.Errorf("tcp_proxy clusters: Consul %v, bridge %v", consulDialed, ourDialed)
	}
	if !slices.Equal(consul.clusters, ours.clusters) {
		t.Errorf("mesh clusters:\nConsul %q\nbridge %q", consul.clusters, ours.clusters)
	}
	for name, eps := range wantEndpoints {
		if !slices.Equal(consul.endpoints[name], eps) || !slices.Equal(ours.endpoints[name], eps) {
			t.Errorf("%s endpoints: want %v; Consul %v, bridge %v", name, eps, consul.endpoints[name], ours.endpoints[name])
		}
	}
}

// tcpDialed is the mesh clusters st's listeners' tcp_proxy filters name,
// sorted.
func tcpDialed(st adsclient.State) []string {
	var dialed []string
	for _, n := range st.ListenerNames() {
		b, _ := protojson.Marshal(st.Listener(n))
		for _, m := range tcpClusterRE.FindAllStringSubmatch(string(b), -1) {
			if strings.Contains(m[1], ".internal.") {
				dialed = append(dialed, m[1])
			}
		}
	}
	slices.Sort(dialed)
	return dialed
}

// tcpClusterRE finds the clusters a listener's tcp_proxy filters name.
var tcpClusterRE = regexp.MustCompile(`"cluster":"([^"]+)"`)

// TestMeshDatacenterFailoverMatchesConsulXDS: a resolver failing over to
// other datacenters only ("*": Datacenters) reaches web's sidecar through
// the bridge as through Consul 1.15.4's own xDS server: db's cluster an
// aggregate over failover-target~ db in dc1, then in dc2, each with its
// datacenter's SNI and SPIFFE id, and dc1's member with db's sidecar.
// (This was a pinned divergence until the bridge served it as Consul.)
func TestMeshDatacenterFailoverMatchesConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	registerServices(t, agent, webWithUpstreams(api.Upstream{DestinationName: "db", LocalBindPort: 9192}),
		&api.AgentServiceRegistration{Name: "db", Port: 5432, Connect: withSidecar()})
	writeEntries(t, agent, &api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "db",
		Failover: map[string]api.ServiceResolverFailover{"*": {Datacenters: []string{"dc2"}}}})
	h := startEntriesBridge(t, agent, "mesh {}\n")
	td := trustDomain(t, agent)
	db1, db2 := ir.MeshClusterName("db", "dc1", td), ir.MeshClusterName("db", "dc2", td)
	ft := func(n string) string { return ir.FailoverTargetPrefix + n }
	want := []string{db1, ft(db1), ft(db2)}
	ready := func(s adsclient.State) bool {
		return slices.Equal(meshClusterNames(s), want) && len(tcpDialed(s)) == 1 && len(s.Endpoints(ft(db1))) == 1
	}
	consul := chainViewOf(webSidecarState(t, agent.GRPCAddr(), ready))
	if c := consul.clusters[0]; !strings.Contains(c, "envoy.clusters.aggregate=["+ft(db1)+" "+ft(db2)+"]") {
		t.Errorf("Consul's db cluster %q is not the aggregate over dc1 then dc2: the reference changed", c)
	}
	ours := chainViewOf(webSidecarState(t, h.daemon.XDSAddr().String(), ready))
	sameChain(t, consul, ours, map[string][]string{ft(db1): {sidecarAddr(t, agent, "db-sidecar-proxy")}})
}
