package xds_test

import (
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// TestBootstrapLocalService: -local-service gives Envoy what zone aware
// routing needs: a static local cluster, named in cluster_manager, whose
// endpoints are the service's over ADS, and the proxy's own locality.
func TestBootstrapLocalService(t *testing.T) {
	b, err := xds.Bootstrap(xds.BootstrapConfig{NodeID: "web-1", Cluster: "web-sidecar", XDS: []string{"127.0.0.1:18000"},
		LocalService: "web", Region: "dc1", Zone: "eu-west-1a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("bootstrap does not validate: %v", err)
	}
	name := b.GetClusterManager().GetLocalClusterName()
	var found bool
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			found = true
			if c.GetEdsClusterConfig().GetServiceName() != "web" || c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
				t.Errorf("local cluster %v: want EDS over ADS for service web", c)
			}
		}
	}
	if name == "" || name == "web" || !found {
		t.Fatalf("local_cluster_name %q: want a static cluster of its own (not the CDS cluster web)", name)
	}
	if l := b.GetNode().GetLocality(); l.GetRegion() != "dc1" || l.GetZone() != "eu-west-1a" {
		t.Errorf("node locality = %v", l)
	}
	plain, _ := xds.Bootstrap(xds.BootstrapConfig{NodeID: "e", Cluster: "edge", XDS: []string{"127.0.0.1:18000"}})
	if plain.GetClusterManager() != nil || plain.GetNode().GetLocality() != nil {
		t.Error("a bootstrap without -local-service names a local cluster or a locality")
	}
}
