package bridge_test

import (
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestMeshGatewayFailoverMatchesConsulXDS (issue 42): api runs in dc1 and
// dc2 (two real Consul 1.15.4 agents, WAN-joined on loopback), its
// resolver fails over to dc2, and its service-defaults say mesh_gateway
// local. For the same registrations and entries, Consul's own xDS server
// and the bridge give
//   - web (no override): api's cluster the aggregate over
//     failover-target~ api in dc1 (api's dc1 sidecar, direct) then in dc2
//     (dc1's mesh gateway at its LAN address, dc2's SNI and SPIFFE id);
//   - web2 (upstream override remote): the same, every name prefixed by
//     Consul's customization hash, and the dc2 member at dc2's gateway's
//     WAN address;
//   - web3 (upstream override local) to pay, split 50/50 between subsets
//     by a splitter: the routes and both subset clusters carry the
//     customization prefix too;
//
// names, SNI, SANs, load balancer, connect timeouts, aggregate members and
// endpoints compared as the other chain comparisons do, each endpoint
// HEALTHY on both.
func TestMeshGatewayFailoverMatchesConsulXDS(t *testing.T) {
	dc1, _, td := twoDatacenters(t)
	registerServices(t, dc1, &api.AgentServiceRegistration{Name: "api", Port: 9090},
		&api.AgentServiceRegistration{Kind: api.ServiceKindConnectProxy, ID: "api-sidecar-proxy", Name: "api-sidecar-proxy", Port: 21001,
			Proxy: &api.AgentServiceConnectProxyConfig{DestinationServiceName: "api", DestinationServiceID: "api", LocalServicePort: 9090}})
	writeEntries(t, dc1,
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", MeshGateway: api.MeshGatewayConfig{Mode: api.MeshGatewayModeLocal}},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api",
			Failover: map[string]api.ServiceResolverFailover{"*": {Datacenters: []string{"dc2"}}}})
	client := func(name string, port, bindPort int, mode api.MeshGatewayMode) {
		meshClient(t, dc1, name, port, api.Upstream{DestinationName: "api", LocalBindPort: bindPort, MeshGateway: api.MeshGatewayConfig{Mode: mode}})
	}
	client("web", 8080, 10000, "")
	client("web2", 8081, 10001, api.MeshGatewayModeRemote)
	// pay: an HTTP chain (subsets v1 and v2, a 50/50 splitter), dialed by
	// web3 with an override.
	sidecar := func(id string, port int, tag string) *api.AgentServiceRegistration {
		return &api.AgentServiceRegistration{Kind: api.ServiceKindConnectProxy, ID: id, Name: "pay-sidecar-proxy", Port: port, Tags: []string{tag},
			Proxy: &api.AgentServiceConnectProxyConfig{DestinationServiceName: "pay", DestinationServiceID: "pay-" + tag, LocalServicePort: 7070}}
	}
	registerServices(t, dc1, &api.AgentServiceRegistration{Name: "pay", ID: "pay-v1", Port: 7070, Tags: []string{"v1"}},
		&api.AgentServiceRegistration{Name: "pay", ID: "pay-v2", Port: 7070, Tags: []string{"v2"}},
		sidecar("pay-v1-sidecar-proxy", 21002, "v1"), sidecar("pay-v2-sidecar-proxy", 21003, "v2"))
	writeEntries(t, dc1,
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "pay", Protocol: "http"},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "pay",
			Subsets: map[string]api.ServiceResolverSubset{"v1": {Filter: `"v1" in Service.Tags`}, "v2": {Filter: `"v2" in Service.Tags`}}},
		&api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: "pay", Splits: []api.ServiceSplit{{Weight: 50, ServiceSubset: "v1"}, {Weight: 50, ServiceSubset: "v2"}}})
	meshClient(t, dc1, "web3", 8082, api.Upstream{DestinationName: "pay", LocalBindPort: 10002, MeshGateway: api.MeshGatewayConfig{Mode: api.MeshGatewayModeLocal}})
	b1 := startEntriesBridge(t, dc1, "export_all_services = false\nmesh {}\n")

	api1, api2 := ir.MeshClusterName("api", "dc1", td), ir.MeshClusterName("api", "dc2", td)
	ft := ir.FailoverTargetPrefix
	for _, tc := range []struct {
		service, prefix, gateway string
	}{{"web", "", "127.0.0.11:8443"}, {"web2", "dd412229~", "127.0.0.22:8443"}} {
		near, far := ft+tc.prefix+api1, ft+tc.prefix+api2
		wantClusters := []string{tc.prefix + api1, near, far}
		slices.Sort(wantClusters)
		want := map[string][]string{near: {"127.0.0.1:21001"}, far: {tc.gateway}}
		var views [2]chainView
		for i, addr := range []string{dc1.GRPCAddr(), b1.daemon.XDSAddr().String()} {
			// Both servers converge on HEALTHY endpoints (api's sidecars
			// pass): data of another datacenter may arrive after the
			// first world, which never waits for it.
			healthy := func(s adsclient.State) bool {
				for _, n := range []string{near, far} {
					for _, ep := range s.Endpoints(n) {
						if ep.Health != "HEALTHY" {
							return false
						}
					}
				}
				return true
			}
			st := stateOf(t, addr, tc.service+"-sidecar-proxy", tc.service, func(s adsclient.State) bool {
				v := chainViewOf(s)
				return slices.Equal(meshClusterNames(s), wantClusters) && slices.Equal(v.endpoints[near], want[near]) && slices.Equal(v.endpoints[far], want[far]) && healthy(s)
			})
			views[i] = chainViewOf(st)
		}
		t.Run(tc.service, func(t *testing.T) { sameChain(t, views[0], views[1], want) })
	}

	v1 := "c225dc1c~" + ir.MeshSubsetClusterName("v1", "pay", "dc1", td)
	v2 := "c225dc1c~" + ir.MeshSubsetClusterName("v2", "pay", "dc1", td)
	want := map[string][]string{v1: {"127.0.0.1:21002"}, v2: {"127.0.0.1:21003"}}
	var views [2]chainView
	for i, addr := range []string{dc1.GRPCAddr(), b1.daemon.XDSAddr().String()} {
		views[i] = chainViewOf(stateOf(t, addr, "web3-sidecar-proxy", "web3", func(s adsclient.State) bool {
			v := chainViewOf(s)
			return len(v.routes) == 1 && slices.Equal(meshClusterNames(s), []string{v1, v2}) && slices.Equal(v.endpoints[v1], want[v1]) && slices.Equal(v.endpoints[v2], want[v2])
		}))
	}
	sameChain(t, views[0], views[1], want)
}
