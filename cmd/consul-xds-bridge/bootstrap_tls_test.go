package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/testpki"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestBootstrapMTLSAgainstSecureBridge: bootstraps printed with a client
// certificate connect to a bridge with client_ca_file and authorize_nodes,
// the ADS client using exactly the TLS files and names the bootstrap
// holds (Envoy's and a proxyless gRPC client's); a bootstrap expecting
// another server name fails the handshake although the CA is the same.
func TestBootstrapMTLSAgainstSecureBridge(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	dir := t.TempDir()
	ca := testpki.New(t)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile := write("ca.pem", ca.PEM)
	srvCert, srvKey := ca.Issue(testpki.Leaf{DNS: []string{"bridge.internal", "localhost"}})
	edgeCert, edgeKey := ca.Issue(testpki.Leaf{URIs: []string{"spiffe://test/group/edge/node/edge-1"}})
	appCert, appKey := ca.Issue(testpki.Leaf{URIs: []string{"spiffe://test/group/grpc-app/node/app-1"}})
	edgeCertFile, edgeKeyFile := write("edge.pem", edgeCert), write("edge-key.pem", edgeKey)
	appCertFile, appKeyFile := write("app.pem", appCert), write("app-key.pem", appKey)
	file := write("config.hcl", []byte(fmt.Sprintf(`
consul {
  address = %q
}
xds {
  tls {
    cert_file      = %q
    key_file       = %q
    client_ca_file = %q
  }
  authorize_nodes = true
}
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        service = "web"
      }
    }
  }
}
# The application the gRPC bootstraps identify (an Envoy-like client
# stands in for it): a group that dials web without routes.
proxy "grpc-app" {
  upstreams = ["web"]
}
`, agent.HTTPAddr(), write("srv.pem", srvCert), write("srv-key.pem", srvKey), caFile)))
	d := runDaemon(t, file)
	_, port, _ := net.SplitHostPort(d.XDSAddr().String())

	bootstrap := func(args ...string) []byte {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := realMain(append([]string{"bootstrap"}, args...), &out, &errOut); code != 0 {
			t.Fatalf("bootstrap %v: exit %d: %s", args, code, errOut.String())
		}
		return out.Bytes()
	}
	envoy := func(serverName string, extra ...string) (*bootstrapv3.Bootstrap, error) {
		y := bootstrap(append([]string{"-node-id", "edge-1", "-cluster", "edge", "-xds", "127.0.0.1:" + port,
			"-tls-ca", caFile, "-tls-cert", edgeCertFile, "-tls-key", edgeKeyFile, "-tls-server-name", serverName}, extra...)...)
		js, err := yaml.YAMLToJSON(y)
		if err != nil {
			t.Fatal(err)
		}
		var b bootstrapv3.Bootstrap
		if err := protojson.Unmarshal(js, &b); err != nil {
			t.Fatal(err)
		}
		if err := b.ValidateAll(); err != nil {
			t.Fatalf("Envoy validation: %v", err)
		}
		return &b, nil
	}
	dial := func(addr, node, cluster string, b []byte, env *bootstrapv3.Bootstrap) (*adsclient.Client, error) {
		t.Helper()
		var cfg adsclient.Config
		var err error
		if env != nil {
			cfg.TLS, err = adsclient.TLSFromEnvoyBootstrap(env, "xds_cluster")
		} else {
			cfg.TLS, addr, err = adsclient.TLSFromGRPCBootstrap(b)
		}
		if err != nil {
			t.Fatal(err)
		}
		cfg.Addr, cfg.NodeID, cfg.Cluster = addr, node, cluster
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := adsclient.Dial(ctx, cfg)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { c.Close() })
		_, err = c.Wait(ctx, func(s adsclient.State) bool { return len(s.Endpoints("web")) == 1 })
		return c, err
	}

	good, _ := envoy("bridge.internal")
	edge, err := dial(d.XDSAddr().String(), "edge-1", "edge", nil, good)
	if err != nil {
		t.Fatalf("Envoy bootstrap with client certificate: %v", err)
	}
	// bootstrap -rest: CDS and LDS polled over HTTP/1.1 on the same
	// port, with the REST cluster's own TLS settings from the bootstrap.
	restBoot, _ := envoy("bridge.internal", "-rest")
	if src := restBoot.GetDynamicResources().GetCdsConfig().GetApiConfigSource(); src.GetApiType() != corev3.ApiConfigSource_REST || src.GetClusterNames()[0] != "xds_rest_cluster" {
		t.Fatalf("-rest CDS config source = %v", src)
	}
	restTLS, err := adsclient.TLSFromEnvoyBootstrap(restBoot, "xds_rest_cluster")
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: restTLS}}
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	r, err := adsclient.FetchREST(rctx, hc, "https://"+d.XDSAddr().String(), adsclient.ClusterType, restBoot.GetNode(), "")
	if err != nil || r.Status != http.StatusOK || r.Resources["web"] == nil || r.Version != edge.Snapshot().Version(adsclient.ClusterType) {
		t.Fatalf("REST CDS with the -rest bootstrap's TLS: %+v %v", r, err)
	}
	wrongName, _ := envoy("other.internal")
	if _, err := dial(d.XDSAddr().String(), "edge-1", "edge", nil, wrongName); err == nil || !strings.Contains(err.Error(), "matches none of the expected names") {
		t.Fatalf("bootstrap naming another server: err = %v, want a failed handshake", err)
	}

	grpcBoot := bootstrap("-grpc", "-node-id", "app-1", "-cluster", "grpc-app", "-xds", "localhost:"+port,
		"-tls-ca", caFile, "-tls-cert", appCertFile, "-tls-key", appKeyFile)
	if _, err := dial("", "app-1", "grpc-app", grpcBoot, nil); err != nil {
		t.Fatalf("gRPC bootstrap with client certificate: %v", err)
	}
	// gRPC checks the host of server_uri: a bridge reached by a name its
	// certificate lacks is refused.
	addrBoot := bootstrap("-grpc", "-node-id", "app-1", "-cluster", "grpc-app", "-xds", "127.0.0.1:"+port,
		"-tls-ca", caFile, "-tls-cert", appCertFile, "-tls-key", appKeyFile)
	if _, err := dial("", "app-1", "grpc-app", addrBoot, nil); err == nil {
		t.Fatal("gRPC bootstrap with a server_uri the certificate does not name connected")
	}
	// The client certificate is what authorize_nodes checks: without it
	// in the bootstrap, the bridge refuses the connection.
	noCert := bootstrap("-grpc", "-node-id", "app-1", "-cluster", "grpc-app", "-xds", "localhost:"+port, "-tls-ca", caFile)
	if _, err := dial("", "app-1", "grpc-app", noCert, nil); err == nil {
		t.Fatal("a bootstrap without a client certificate connected to a bridge requiring one")
	}
}
