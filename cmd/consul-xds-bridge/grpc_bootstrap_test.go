package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// TestBootstrapGRPC checks the CLI wiring of bootstrap -grpc: what it
// prints is, byte for byte, what xds.GRPCBootstrap returns, which the
// bridge's end-to-end tests (TestProxylessGRPC*) feed to real grpc-go and
// grpc-node clients.
func TestBootstrapGRPC(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := realMain([]string{"bootstrap", "-grpc", "-node-id", "app-1", "-cluster", "grpc-app", "-xds", "127.0.0.1:18000"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var b struct {
		XDSServers []struct {
			ServerURI      string   `json:"server_uri"`
			ServerFeatures []string `json:"server_features"`
			ChannelCreds   []struct {
				Type string `json:"type"`
			} `json:"channel_creds"`
		} `json:"xds_servers"`
		Node map[string]any `json:"node"`
	}
	if err := json.Unmarshal(out.Bytes(), &b); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if len(b.XDSServers) != 1 || b.XDSServers[0].ServerURI != "127.0.0.1:18000" || b.XDSServers[0].ChannelCreds[0].Type != "insecure" ||
		!slices.Equal(b.XDSServers[0].ServerFeatures, []string{"xds_v3", "ignore_resource_deletion"}) {
		t.Errorf("xds_servers = %+v", b.XDSServers)
	}
	if b.Node["id"] != "app-1" || b.Node["cluster"] != "grpc-app" || b.Node["user_agent_name"] != nil {
		t.Errorf("node = %v (user_agent_name is gRPC's to set)", b.Node)
	}
	if loc, ok := b.Node["locality"].(map[string]any); !ok || len(loc) != 0 {
		t.Errorf("node.locality = %#v, want {} (grpc-node refuses a node without locality)", b.Node["locality"])
	}
	lib, err := xds.GRPCBootstrap(xds.BootstrapConfig{NodeID: "app-1", Cluster: "grpc-app", XDS: []string{"127.0.0.1:18000"}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), lib) {
		t.Errorf("bootstrap -grpc printed\n%s\nxds.GRPCBootstrap returns\n%s", out.Bytes(), lib)
	}
	errOut.Reset()
	if code := realMain([]string{"bootstrap", "-grpc", "-xds", "127.0.0.1:18000"}, &bytes.Buffer{}, &errOut); code != 2 {
		t.Errorf("missing -node-id: exit %d, want 2 (%s)", code, errOut.String())
	}
}
