package serve

import (
	"context"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
)

// TestUnchangedGroupsKeepTheirSets: after an update whose only change is
// one group's endpoints (the endpoint-only path patches just the
// resources holding the flipped cluster), every other group is served
// the very sets it had, not rebuilt ones, while the changed group gets
// the new endpoints. A set per group and type was rebuilt on every flip:
// a third of the server's CPU per flip with 50 groups (issue 40).
func TestUnchangedGroupsKeepTheirSets(t *testing.T) {
	s := startServer(t, ServerConfig{})
	base := testOutput(t, []string{"api", "web"}, 8080)
	edge := base.Groups["edge"]
	reachOf := func(i int) *xds.Resources {
		return &xds.Resources{Clusters: base.Shared.Clusters[i : i+1], Endpoints: base.Shared.Endpoints[i : i+1]}
	}
	out1 := &xds.Output{Shared: base.Shared, Groups: map[string]*xds.Resources{"a": edge, "b": edge},
		Reach: map[string]*xds.Resources{"a": reachOf(0), "b": reachOf(1)}, ProxylessReach: base.Shared, Unmatched: base.Shared}
	same := func(nc string) string { return nc }
	if _, err := s.Update(context.Background(), out1, same); err != nil {
		t.Fatal(err)
	}
	s.sawNode("a")
	s.sawNode("b")
	before := map[string]map[string]*cache.Set{"a": s.cache.Served("a"), "b": s.cache.Served("b")}

	// Group a's endpoints flip; b's reach and both groups' listeners are
	// the same resources as before.
	flipped := proto.Clone(out1.Reach["a"].Endpoints[0]).(*endpointv3.ClusterLoadAssignment)
	flipped.Endpoints[0].LbEndpoints[0].HealthStatus = 2 // UNHEALTHY
	reachA := &xds.Resources{Clusters: out1.Reach["a"].Clusters, Endpoints: []*endpointv3.ClusterLoadAssignment{flipped}}
	out2 := *out1
	out2.Reach = map[string]*xds.Resources{"a": reachA, "b": out1.Reach["b"]}
	s.mu.Lock()
	builds, keys := s.setBuilds, s.keysSet
	s.mu.Unlock()
	changed, err := s.Update(context.Background(), &out2, same)
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 1 || changed[0] != resourcev3.EndpointType {
		t.Fatalf("changed types %v, want only endpoints", changed)
	}
	s.mu.Lock()
	builds, keys = s.setBuilds-builds, s.keysSet-keys
	s.mu.Unlock()
	if keys != 1 {
		t.Errorf("the update computed the sets of %d keys, want 1 (group a's)", keys)
	}
	// Group a's clusters, endpoints and secrets come from its reach, which
	// the flip replaced; nothing else is built again.
	if builds != 3 {
		t.Errorf("the update built %d sets, want 3 (group a's clusters, endpoints and secrets)", builds)
	}
	after := map[string]map[string]*cache.Set{"a": s.cache.Served("a"), "b": s.cache.Served("b")}
	for _, typ := range cache.TypeOrder {
		if after["b"][typ] != before["b"][typ] {
			t.Errorf("group b's %s set was rebuilt though nothing it is served changed", typ)
		}
		if typ != resourcev3.EndpointType && after["a"][typ] != before["a"][typ] {
			t.Errorf("group a's %s set was rebuilt though only its endpoints changed", typ)
		}
	}
	if after["a"][resourcev3.EndpointType] == before["a"][resourcev3.EndpointType] {
		t.Fatal("group a keeps its old endpoints set: the flip is not served")
	}
	got := after["a"][resourcev3.EndpointType].Entries()
	if len(got) != 1 || !proto.Equal(got[0].Resource(), flipped) {
		t.Fatalf("group a is served %v, want the flipped endpoints", got)
	}

	// Then b's endpoints flip. Its sets were left alone in the update
	// before, and its chains kept: only its endpoints set changes (a
	// clusters set built from nothing would be a new one, and a push).
	flippedB := proto.Clone(out1.Reach["b"].Endpoints[0]).(*endpointv3.ClusterLoadAssignment)
	flippedB.Endpoints[0].LbEndpoints[0].HealthStatus = 2
	out3 := out2
	out3.Reach = map[string]*xds.Resources{"a": reachA, "b": {Clusters: out1.Reach["b"].Clusters, Endpoints: []*endpointv3.ClusterLoadAssignment{flippedB}}}
	if changed, err := s.Update(context.Background(), &out3, same); err != nil || len(changed) != 1 || changed[0] != resourcev3.EndpointType {
		t.Fatalf("b's flip changed %v (%v), want only endpoints", changed, err)
	}
	final := s.cache.Served("b")
	for _, typ := range cache.TypeOrder {
		if typ != resourcev3.EndpointType && final[typ] != before["b"][typ] {
			t.Errorf("group b's %s set changed with only its endpoints", typ)
		}
	}
	if got := final[resourcev3.EndpointType].Entries(); len(got) != 1 || !proto.Equal(got[0].Resource(), flippedB) {
		t.Fatalf("group b is served %v, want its flipped endpoints", got)
	}
}

// TestSecretsFollowEachRolesReach: the secrets a key is served come from
// its group and its reach. Two roles may share a group's resources (the
// empty ones of unmatched Envoys and of proxyless clients with no
// proxyless group) and still reach different clusters: each gets the
// secrets of its own reach, never the other's.
func TestSecretsFollowEachRolesReach(t *testing.T) {
	s := startServer(t, ServerConfig{})
	base := testOutput(t, []string{"api"}, 8080)
	secret := &tlsv3.Secret{Name: "api-upstream-ca"}
	out := &xds.Output{Shared: base.Shared, Groups: map[string]*xds.Resources{},
		Reach:          map[string]*xds.Resources{},
		ProxylessReach: &xds.Resources{},
		Unmatched:      &xds.Resources{Clusters: base.Shared.Clusters, Endpoints: base.Shared.Endpoints, Secrets: []*tlsv3.Secret{secret}}}
	none := func(string) string { return "" }
	if _, err := s.Update(context.Background(), out, none); err != nil {
		t.Fatal(err)
	}
	proxyless := cache.Key(&corev3.Node{Cluster: "x", UserAgentName: "gRPC Go"})
	s.sawNode(proxyless)
	s.sawNode("other")
	if _, err := s.Update(context.Background(), out, none); err != nil {
		t.Fatal(err)
	}
	names := func(key string) []string {
		var out []string
		for _, e := range s.cache.Served(key)[resourcev3.SecretType].Entries() {
			out = append(out, e.Name())
		}
		return out
	}
	if got := names("other"); len(got) != 1 || got[0] != secret.Name {
		t.Errorf("an unmatched Envoy is served secrets %v, want its reach's [%s]", got, secret.Name)
	}
	if got := names(proxyless); len(got) != 0 {
		t.Errorf("a proxyless client is served secrets %v of the unmatched Envoys' reach, want none", got)
	}
}
