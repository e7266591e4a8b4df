package xds

import (
	"errors"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// TestAggregateCluster: a mesh failover's aggregate cluster is Envoy's
// envoy.clusters.aggregate over its members in order, with the
// cluster-provided load balancer, no EDS and no TLS (it passes Envoy's
// proto validation); the served set is inconsistent when a member is
// not served (Envoy would skip it: a failover that never happens).
func TestAggregateCluster(t *testing.T) {
	members := []string{ir.FailoverTargetPrefix + "api.default.dc1.internal.td", ir.FailoverTargetPrefix + "api-backup.default.dc1.internal.td"}
	agg := buildCluster(&ir.Cluster{Name: "api.default.dc1.internal.td", ConnectTimeout: 3 * time.Second, Aggregate: members})
	if err := agg.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	got, err := aggregateMembers(agg)
	if err != nil || strings.Join(got, ",") != strings.Join(members, ",") {
		t.Fatalf("members %v (%v), want %v", got, err, members)
	}
	if agg.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED || agg.GetEdsClusterConfig() != nil || agg.GetTransportSocket() != nil {
		t.Errorf("aggregate cluster %v: want CLUSTER_PROVIDED, no EDS, no TLS", agg)
	}
	member := func(name string) *clusterv3.Cluster {
		return buildCluster(&ir.Cluster{Name: name, ConnectTimeout: time.Second})
	}
	shared := &Resources{Clusters: []*clusterv3.Cluster{agg, member(members[0])}, Endpoints: nil}
	shared.Endpoints = append(shared.Endpoints, buildLoadAssignment(&ir.Cluster{Name: members[0]}))
	err = sharedConsistent(shared, refsOf)
	if !errors.Is(err, ErrInconsistent) || !strings.Contains(err.Error(), members[1]) {
		t.Errorf("a missing member: %v, want inconsistent naming %s", err, members[1])
	}
	shared.Clusters = append(shared.Clusters, member(members[1]))
	shared.Endpoints = append(shared.Endpoints, buildLoadAssignment(&ir.Cluster{Name: members[1]}))
	if err := sharedConsistent(shared, refsOf); err != nil {
		t.Errorf("every member served: %v", err)
	}
}
