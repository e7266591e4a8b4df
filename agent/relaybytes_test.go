package agent_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// reordered encodes m with its top-level fields in reverse order: valid
// protobuf that decodes to m (the wire format lets fields come in any
// order; m has no repeated top-level field, whose order would matter),
// but not the bytes any deterministic encoder writes.
func reordered(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var fields [][]byte
	for len(b) > 0 {
		_, _, n := protowire.ConsumeField(b)
		if n < 0 {
			t.Fatal(protowire.ParseError(n))
		}
		fields, b = append(fields, b[:n]), b[n:]
	}
	slices.Reverse(fields)
	out := bytes.Join(fields, nil)
	back := proto.Clone(m)
	proto.Reset(back)
	if err := proto.Unmarshal(out, back); err != nil || !proto.Equal(back, m) {
		t.Fatalf("reordered bytes do not decode to the message (%v)", err)
	}
	return out
}

// TestAgentRelaysTheBytesItReceived: a local Envoy gets a relayed resource
// in the very bytes the central bridge sent, and the data directory holds
// those bytes too: the agent neither encodes what it relays again to
// serve it nor to save it. The central sends its cluster with its fields
// in an order no encoder here writes, so a re-encoding would show.
func TestAgentRelaysTheBytesItReceived(t *testing.T) {
	cluster := &clusterv3.Cluster{
		Name:                 "api",
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		AltStatName:          "api-relayed",
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: "api", Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 9000}}}}}}}},
		}}},
	}
	sent := reordered(t, cluster)
	cen := startStandIn(t, nil, func(string) *xds.Resources {
		return &xds.Resources{Clusters: []*clusterv3.Cluster{cluster},
			Encoded: map[proto.Message]*anypb.Any{cluster: {TypeUrl: resourcev3.ClusterType, Value: sent}}}
	})
	dir := t.TempDir()
	ag := startAgentWith(t, dir, func(c *agent.Config) { c.Upstreams = []string{cen.addr} })
	c := dialWith(t, adsclient.Config{Addr: "unix://" + ag.SocketAddr().String(), NodeID: "p", Cluster: "web", Mode: adsclient.Delta})
	wait(t, c, "the relayed cluster", 15*time.Second, func(s adsclient.State) bool { return s.Cluster("api") != nil })
	got := c.Snapshot().Types[adsclient.ClusterType].Encoded["api"].GetValue()
	if !bytes.Equal(got, sent) {
		t.Errorf("the local Envoy got %d bytes the central did not send (the agent encoded the cluster again)", len(got))
	}
	eventually(t, 10*time.Second, "the central's bytes in the data directory", func() bool {
		files, _ := filepath.Glob(filepath.Join(dir, "data", "node-*.pb"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, sent) {
				return true
			}
		}
		return false
	})
}
