package agent_test

import (
	"net"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/h2wire"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

const deltaADSPath = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"

// TestRelaySendsItsNodeOnce: on the wire to the central bridge, the
// agent's relay stream carries its node (id, node.cluster and the Envoys
// it relays) on its first request only, as an Envoy with
// set_node_on_first_message_only does, and the ACKs and subscriptions
// that follow carry none; the central still counts them as that
// stream's (TestCentralSeesRelayedEnvoys).
func TestRelaySendsItsNodeOnce(t *testing.T) {
	tee := &h2wire.Listener{}
	cen := startStandInOn(t, func(l net.Listener) net.Listener { tee.Listener = l; return tee }, nil, rateLimitWorld(t))
	var logs syncbuffer.Buffer
	ag := startAgentWith(t, t.TempDir(), func(c *agent.Config) { c.Upstreams = []string{cen.addr} }, &logs)
	c := dialWith(t, adsclient.Config{Addr: "unix://" + ag.SocketAddr().String(), NodeID: "vm-1-edge", Cluster: "edge-rl", UserAgentVersion: "1.40.0", Mode: adsclient.Delta})
	wait(t, c, "the routes", 15*time.Second, func(s adsclient.State) bool { return len(s.Types[adsclient.RouteType].Resources) > 0 })
	eventually(t, 15*time.Second, "the central bridge seeing the relay stream synced", func() bool {
		for _, p := range cen.srv.Proxies() {
			if p.NodeCluster == "edge-rl" && len(p.RelayedEnvoys) == 1 {
				for _, ts := range p.Types {
					if ts.VersionSent == "" || ts.VersionAcked != ts.VersionSent {
						return false
					}
				}
				return len(p.Types) >= 4
			}
		}
		return false
	})
	streams, err := tee.Messages(deltaADSPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(streams) == 0 {
		t.Fatal("no delta ADS stream on the wire to the central bridge")
	}
	// The last stream: one reporting the Envoy.
	var reqs []*discoveryv3.DeltaDiscoveryRequest
	for _, m := range streams[len(streams)-1] {
		r := &discoveryv3.DeltaDiscoveryRequest{}
		if err := proto.Unmarshal(m, r); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	if len(reqs) < 5 {
		t.Fatalf("%d requests on the relay's last stream, want its first, the subscriptions and the ACKs", len(reqs))
	}
	if n := reqs[0].GetNode(); n.GetId() != "vm-1" || n.GetCluster() != "edge-rl" || n.GetMetadata().GetFields()["consul_xds_bridge_relayed_envoys"].GetStringValue() != "vm-1-edge@1.40" {
		t.Errorf("the first request's node = %v, want vm-1 in edge-rl relaying vm-1-edge@1.40", n)
	}
	for i, r := range reqs[1:] {
		if r.GetNode() != nil {
			t.Errorf("request %d of %d (%s, nonce %q) carries the node %v; want it on the first only", i+1, len(reqs), r.GetTypeUrl(), r.GetResponseNonce(), r.GetNode())
		}
	}
}
