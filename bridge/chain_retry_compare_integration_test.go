package bridge_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestMeshRetriesAndTimeoutsMatchConsulXDS: a router's retries and a
// resolver's request timeout reach web's sidecar from the bridge as from
// Consul 1.15.4's own xDS server. A destination with NumRetries alone
// retries nothing (Consul joins only RetryOn, connect-failure and status
// codes into retry_on; the bridge used to invent 5xx, connect-failure and
// reset); RetryOn with connect-failure keeps Consul's order; a resolver's
// RequestTimeout applies only where the chain starts at the resolver (db),
// not to a router's routes or its catch-all (api).
func TestMeshRetriesAndTimeoutsMatchConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	registerServices(t, agent,
		webWithUpstreams(api.Upstream{DestinationName: "api", LocalBindPort: 9191}, api.Upstream{DestinationName: "db", LocalBindPort: 9192}),
		&api.AgentServiceRegistration{Name: "api", ID: "api-1", Port: 9090, Tags: []string{"v1"}, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "api", ID: "api-2", Port: 9092, Tags: []string{"v2"}, Connect: withSidecar()},
		&api.AgentServiceRegistration{Name: "db", Port: 9093, Connect: withSidecar()})
	writeEntries(t, agent,
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"},
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "db", Protocol: "http"},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", DefaultSubset: "v1", RequestTimeout: 7 * time.Second,
			Subsets: map[string]api.ServiceResolverSubset{"v1": {Filter: `"v1" in Service.Tags`}, "v2": {Filter: `"v2" in Service.Tags`}}},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "db", RequestTimeout: 5 * time.Second},
		&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "api", Routes: []api.ServiceRoute{
			{
				Match:       &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{Header: []api.ServiceRouteHTTPMatchHeader{{Name: "x-a", Exact: "1"}}}},
				Destination: &api.ServiceRouteDestination{ServiceSubset: "v2", NumRetries: 3},
			},
			{
				Match: &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{Header: []api.ServiceRouteHTTPMatchHeader{{Name: "x-b", Exact: "1"}}}},
				Destination: &api.ServiceRouteDestination{ServiceSubset: "v2", NumRetries: 2, RetryOn: []string{"5xx", "gateway-error"},
					RetryOnConnectFailure: true, RequestTimeout: 2 * time.Second},
			},
		}})
	h := startEntriesBridge(t, agent, "mesh {}\n")
	td := trustDomain(t, agent)
	v1, v2 := ir.MeshSubsetClusterName("v1", "api", "dc1", td), ir.MeshSubsetClusterName("v2", "api", "dc1", td)
	db := ir.MeshClusterName("db", "dc1", td)
	ready := func(s adsclient.State) bool {
		v := chainViewOf(s)
		return len(v.routes) == 4 && len(v.endpoints[v1]) > 0 && len(v.endpoints[v2]) > 0 && len(v.endpoints[db]) > 0 &&
			slices.Equal(meshClusterNames(s), slices.Sorted(slices.Values([]string{v1, v2, db})))
	}
	consul := chainViewOf(webSidecarState(t, agent.GRPCAddr(), ready))
	ours := chainViewOf(webSidecarState(t, h.daemon.XDSAddr().String(), ready))
	// The reference itself, so that a change of Consul's is seen as such.
	for _, want := range []string{
		fmt.Sprintf("[x-a=1] -> %s=1 timeout 0s", v2),
		fmt.Sprintf("[x-b=1] -> %s=1 timeout 2s retry 5xx,gateway-error,connect-failure/2", v2),
		fmt.Sprintf("[] -> %s=1 timeout 0s", v1),
		fmt.Sprintf("[] -> %s=1 timeout 5s", db),
	} {
		if !slices.Contains(consul.routes, want) {
			t.Fatalf("Consul's own routes %q lack %q: the reference changed", consul.routes, want)
		}
	}
	sameChain(t, consul, ours, map[string][]string{
		v1: {apiSidecarAddr(t, agent, "api-1-sidecar-proxy")}, v2: {apiSidecarAddr(t, agent, "api-2-sidecar-proxy")},
		db: {instanceSidecarAddr(t, agent, "db", "db-sidecar-proxy")}})
}
