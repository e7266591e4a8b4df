package agent

import (
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// TestUpstreamNode: a sidecar group is relayed as its registered proxy
// (id, service, consul_node); one whose registration is gone is not
// relayed at all (never as node.cluster "", which a "*" group matches);
// other keys go as the agent itself.
func TestUpstreamNode(t *testing.T) {
	a := &Agent{cfg: &Config{NodeID: "vm-a-agent"}}
	group := ir.SidecarGroupName("vm-a", "web-sidecar-proxy")
	a.sidecars = &localSidecars{a: a, index: map[string][]serve.SidecarInfo{
		"web-sidecar-proxy": {{Node: "vm-a", Service: "web"}},
	}}
	id, cluster, meta, ok := a.upstreamNode(serve.RelayKey{Key: group, NodeCluster: group})
	if !ok || id != "web-sidecar-proxy" || cluster != "web" || meta[xds.ConsulNodeMetadata] != "vm-a" {
		t.Errorf("sidecar relayed as %q/%q %v (%v)", id, cluster, meta, ok)
	}
	gone := ir.SidecarGroupName("vm-a", "db-sidecar-proxy")
	if _, _, _, ok := a.upstreamNode(serve.RelayKey{Key: gone, NodeCluster: gone}); ok {
		t.Error("a sidecar without a registration is relayed")
	}
	if id, cluster, _, ok := a.upstreamNode(serve.RelayKey{Key: "edge", NodeCluster: "edge"}); !ok || id != "vm-a-agent" || cluster != "edge" {
		t.Errorf("edge relayed as %q/%q", id, cluster)
	}
}
