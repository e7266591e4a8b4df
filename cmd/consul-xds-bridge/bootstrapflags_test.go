package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// TestXDSAddressForms: the address forms operators paste work, the ones
// that cannot be meant are refused with the form to use.
func TestXDSAddressForms(t *testing.T) {
	for in, want := range map[string]struct{ hostPort, unix string }{
		"10.0.0.5:18000":                         {"10.0.0.5:18000", ""},
		"http://bridge.internal:18000":           {"bridge.internal:18000", ""},
		"grpc://bridge.internal:18000/":          {"bridge.internal:18000", ""},
		"tcp://[::1]:18000":                      {"[::1]:18000", ""},
		"dns:///bridge.internal:18000":           {"bridge.internal:18000", ""},
		"unix:///run/consul-xds-bridge/xds.sock": {"", "/run/consul-xds-bridge/xds.sock"},
	} {
		hp, unix, _, err := xdsAddress(in)
		if err != nil || hp != want.hostPort || unix != want.unix {
			t.Errorf("%q: %q %q %v, want %q %q", in, hp, unix, err, want.hostPort, want.unix)
		}
	}
	for in, wantErr := range map[string]string{
		"bridge.internal":               "want HOST:PORT",
		"http://bridge.internal":        "want HOST:PORT",
		"http://bridge.internal:1/xds":  "no path or query",
		"ftp://bridge.internal:18000":   "unknown scheme",
		"unix://":                       "no socket path",
		"http://host:port:too:many:col": "want HOST:PORT",
	} {
		if _, _, _, err := xdsAddress(in); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%q: error %v, want one saying %q", in, err, wantErr)
		}
	}
}

// TestBootstrapSchemeAndAbsolutePaths: `-xds http://HOST:PORT` gives
// the same bootstrap as HOST:PORT (it used to fail with "too many
// colons"), https:// without a CA is refused, and relative TLS files are
// written as absolute paths for Envoy, which runs in / under systemd.
func TestBootstrapSchemeAndAbsolutePaths(t *testing.T) {
	bootstrap := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := realMain(append([]string{"bootstrap", "-node-id", "e1", "-cluster", "edge"}, args...), &out, &errOut)
		return out.String(), errOut.String(), code
	}
	plain, _, code := bootstrap("-xds", "10.0.0.5:18000")
	withScheme, errOut, code2 := bootstrap("-xds", "http://10.0.0.5:18000")
	if code != 0 || code2 != 0 || plain != withScheme {
		t.Errorf("-xds http://HOST:PORT: exit %d %s; differs from HOST:PORT:\n%s\n%s", code2, errOut, plain, withScheme)
	}
	if _, errOut, code := bootstrap("-xds", "https://bridge.internal:18000"); code != 2 || !strings.Contains(errOut, "-tls-ca FILE") {
		t.Errorf("https:// without -tls-ca: exit %d, %s", code, errOut)
	}

	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("ca.pem", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := bootstrap("-xds", "https://bridge.internal:18000", "-tls-ca", "ca.pem", "-tls-cert", "tls/c.pem", "-tls-key", "tls/k.pem")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{filepath.Join(dir, "ca.pem"), filepath.Join(dir, "tls/c.pem"), filepath.Join(dir, "tls/k.pem")} {
		if !strings.Contains(out, "filename: "+want+"\n") {
			t.Errorf("bootstrap lacks the absolute path %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "filename: ca.pem") {
		t.Errorf("relative path written:\n%s", out)
	}

	// gRPC: the same, and the A53 server feature.
	var gout, gerr bytes.Buffer
	if code := realMain([]string{"bootstrap", "-grpc", "-node-id", "g1", "-xds", "grpc://bridge.internal:18000", "-tls-ca", "ca.pem"}, &gout, &gerr); code != 0 {
		t.Fatalf("-grpc: exit %d: %s", code, gerr.String())
	}
	var b struct {
		XDSServers []struct {
			ServerURI      string   `json:"server_uri"`
			ServerFeatures []string `json:"server_features"`
			ChannelCreds   []struct {
				Config map[string]string `json:"config"`
			} `json:"channel_creds"`
		} `json:"xds_servers"`
	}
	if err := json.Unmarshal(gout.Bytes(), &b); err != nil {
		t.Fatal(err)
	}
	s := b.XDSServers[0]
	if s.ServerURI != "bridge.internal:18000" || s.ChannelCreds[0].Config["ca_certificate_file"] != filepath.Join(dir, "ca.pem") {
		t.Errorf("gRPC server %+v", s)
	}
	lib, _ := xds.GRPCBootstrap(xds.BootstrapConfig{NodeID: "g1", XDS: []string{"h:1"}})
	if !strings.Contains(string(lib), `"ignore_resource_deletion"`) {
		t.Errorf("gRPC bootstrap lacks ignore_resource_deletion:\n%s", lib)
	}
}
