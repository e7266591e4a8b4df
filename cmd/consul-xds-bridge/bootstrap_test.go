package main

import (
	"bytes"
	"slices"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"
)

// TestBootstrapIsValidEnvoyConfig parses the printed YAML back into
// Envoy's Bootstrap proto and runs Envoy's own validation on it.
func TestBootstrapIsValidEnvoyConfig(t *testing.T) {
	tests := map[string][]string{
		"one ip":          {"-node-id", "edge-1", "-cluster", "edge", "-xds", "127.0.0.1:18000"},
		"replicas by dns": {"-node-id", "edge-1", "-cluster", "edge", "-xds", "bridge-a.internal:18000", "-xds", "bridge-b.internal:18000", "-tls-ca", "/etc/ca.pem"},
		"unix socket":     {"-node-id", "edge-1", "-cluster", "edge", "-xds-unix", "/run/consul-xds-bridge/xds.sock", "-admin-port", "9901"},
		"mtls":            {"-node-id", "edge-1", "-cluster", "edge", "-xds", "10.0.0.5:18000", "-tls-ca", "/etc/ca.pem", "-tls-cert", "/etc/c.pem", "-tls-key", "/etc/k.pem", "-tls-server-name", "bridge.internal"},
		"rest":            {"-node-id", "edge-1", "-cluster", "edge", "-xds", "bridge.internal:18000", "-tls-ca", "/etc/ca.pem", "-rest", "-rest-refresh", "2s"},
	}
	for name, args := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := realMain(append([]string{"bootstrap"}, args...), &out, &errOut); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			js, err := yaml.YAMLToJSON(out.Bytes())
			if err != nil {
				t.Fatalf("output is not YAML: %v\n%s", err, out.String())
			}
			var b bootstrapv3.Bootstrap
			if err := protojson.Unmarshal(js, &b); err != nil {
				t.Fatalf("output is not an Envoy Bootstrap: %v\n%s", err, out.String())
			}
			if err := b.ValidateAll(); err != nil {
				t.Fatalf("Envoy validation: %v", err)
			}
			if b.GetNode().GetId() != "edge-1" || b.GetNode().GetCluster() != "edge" {
				t.Errorf("node = %v", b.GetNode())
			}
			dr := b.GetDynamicResources()
			if dr.GetAdsConfig().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "xds_cluster" {
				t.Errorf("no ADS stream to xds_cluster: %v", dr)
			}
			// docs/scaling.md promises Envoy sends its node (its extension
			// list: 10–25 KiB) with a stream's first request only.
			if !dr.GetAdsConfig().GetSetNodeOnFirstMessageOnly() {
				t.Error("ads_config does not set set_node_on_first_message_only")
			}
			switch rest := dr.GetCdsConfig().GetApiConfigSource(); {
			case name == "rest" && (rest.GetApiType().String() != "REST" || dr.GetLdsConfig().GetApiConfigSource().GetRefreshDelay().AsDuration().String() != "2s" ||
				len(b.GetStaticResources().GetClusters()) != 2 || b.GetStaticResources().GetClusters()[1].GetName() != "xds_rest_cluster"):
				t.Errorf("-rest: CDS and LDS not polled over REST from xds_rest_cluster: %v", &b)
			case name != "rest" && (dr.GetCdsConfig().GetAds() == nil || dr.GetLdsConfig().GetAds() == nil):
				t.Errorf("dynamic resources do not use ADS for CDS and LDS: %v", dr)
			}
			xds := b.GetStaticResources().GetClusters()[0]
			if got, want := len(xds.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()), max(1, len(args)/2-3); name == "replicas by dns" && got != 2 {
				t.Errorf("xds_cluster has %d endpoints, want 2 (%d)", got, want)
			}
			if _, ok := xds.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; !ok {
				t.Error("xds_cluster does not speak HTTP/2")
			}
			// docs/getting-started.md: Envoy's admin listens on
			// 127.0.0.1, on -admin-port, 19000 unless given.
			wantPort := uint32(19000)
			if slices.Contains(args, "-admin-port") {
				wantPort = 9901 // the "unix socket" case sets it
			}
			if sa := b.GetAdmin().GetAddress().GetSocketAddress(); sa.GetAddress() != "127.0.0.1" || sa.GetPortValue() != wantPort {
				t.Errorf("admin listens on %s:%d, want 127.0.0.1:%d", sa.GetAddress(), sa.GetPortValue(), wantPort)
			}
		})
	}
	var errOut bytes.Buffer
	if code := realMain([]string{"bootstrap", "-node-id", "x"}, &bytes.Buffer{}, &errOut); code != 2 {
		t.Errorf("missing -cluster/-xds: exit %d, want 2 (%s)", code, errOut.String())
	}
}
