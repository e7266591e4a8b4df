package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestBootstrapGRPC checks the CLI wiring of bootstrap -grpc; the JSON
// itself is fed to a real grpc-go client by the bridge's end-to-end test
// (TestProxylessGRPCEndToEnd), through xds.GRPCBootstrap, which this calls.
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
		Node map[string]string `json:"node"`
	}
	if err := json.Unmarshal(out.Bytes(), &b); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if len(b.XDSServers) != 1 || b.XDSServers[0].ServerURI != "127.0.0.1:18000" || b.XDSServers[0].ChannelCreds[0].Type != "insecure" ||
		len(b.XDSServers[0].ServerFeatures) != 1 || b.XDSServers[0].ServerFeatures[0] != "xds_v3" {
		t.Errorf("xds_servers = %+v", b.XDSServers)
	}
	if b.Node["id"] != "app-1" || b.Node["cluster"] != "grpc-app" || b.Node["user_agent_name"] != "" {
		t.Errorf("node = %v (user_agent_name is gRPC's to set)", b.Node)
	}
	errOut.Reset()
	if code := realMain([]string{"bootstrap", "-grpc", "-xds", "127.0.0.1:18000"}, &bytes.Buffer{}, &errOut); code != 2 {
		t.Errorf("missing -node-id: exit %d, want 2 (%s)", code, errOut.String())
	}
}
