package xds

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// adsSource tells Envoy to fetch a cluster's endpoints over the same ADS
// stream, which keeps CDS and EDS updates ordered.
func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

var lbPolicies = map[ir.LBPolicy]clusterv3.Cluster_LbPolicy{
	"":                clusterv3.Cluster_ROUND_ROBIN,
	ir.LBRoundRobin:   clusterv3.Cluster_ROUND_ROBIN,
	ir.LBLeastRequest: clusterv3.Cluster_LEAST_REQUEST,
	ir.LBRingHash:     clusterv3.Cluster_RING_HASH,
	ir.LBRandom:       clusterv3.Cluster_RANDOM,
}

func buildCluster(c *ir.Cluster) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 c.Name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		// No service_name: the EDS resource is named like the cluster.
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()},
		ConnectTimeout:   durationpb.New(c.ConnectTimeout),
		LbPolicy:         lbPolicies[c.LBPolicy],
		CommonLbConfig: &clusterv3.Cluster_CommonLbConfig{
			// Consul already tells us which endpoints are unhealthy; Envoy's
			// default panic mode (route to all hosts once half are unhealthy)
			// would send traffic to instances Consul reports as failing.
			HealthyPanicThreshold: &typev3.Percent{Value: 0},
		},
	}
}
