package xds

import (
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// aggregateClusterType is Envoy's extension name of the aggregate
// cluster (Envoy's docs: "Aggregate Cluster").
const aggregateClusterType = "envoy.clusters.aggregate"

// aggregateCluster is a mesh failover as Consul serves it: Envoy sends
// to the first of the clusters (the target, then its failover targets)
// that has healthy hosts, each with its own endpoints, SNI and identity.
// Its load balancer is the chosen cluster's (CLUSTER_PROVIDED).
func aggregateCluster(c *ir.Cluster) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name: c.Name,
		ClusterDiscoveryType: &clusterv3.Cluster_ClusterType{ClusterType: &clusterv3.Cluster_CustomClusterType{
			Name:        aggregateClusterType,
			TypedConfig: mustAny(&aggregatev3.ClusterConfig{Clusters: slices.Clone(c.Aggregate)}),
		}},
		ConnectTimeout: durationpb.New(c.ConnectTimeout),
		LbPolicy:       clusterv3.Cluster_CLUSTER_PROVIDED,
	}
}

// aggregateMembers are the clusters an aggregate cluster sends to; nil
// for any other cluster.
func aggregateMembers(c *clusterv3.Cluster) ([]string, error) {
	ct := c.GetClusterType()
	if ct.GetName() != aggregateClusterType {
		return nil, nil
	}
	cfg := &aggregatev3.ClusterConfig{}
	if err := ct.GetTypedConfig().UnmarshalTo(cfg); err != nil {
		return nil, fmt.Errorf("aggregate cluster config: %w", err)
	}
	return cfg.GetClusters(), nil
}
