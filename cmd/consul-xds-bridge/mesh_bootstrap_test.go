package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/tls/certprovider"
	_ "google.golang.org/grpc/credentials/tls/certprovider/pemfile" // registers file_watcher
	grpcxds "google.golang.org/grpc/xds"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/testpki"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// TestBootstrapGRPCMesh: bootstrap -grpc -mesh-cert-dir adds a
// file_watcher certificate provider reading the agent's files and the
// server listener template; grpc-go's own parsers take the bootstrap (as
// a client's and as an xDS server's), and the provider built from it
// loads the identity and roots from the directory.
func TestBootstrapGRPCMesh(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.New(t)
	cert, key := ca.Issue(testpki.Leaf{URIs: []string{"spiffe://td.consul/ns/default/dc/dc1/svc/echo"}})
	for name, b := range map[string][]byte{xds.MeshCertFile: cert, xds.MeshKeyFile: key, xds.MeshRootsFile: ca.PEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	if code := realMain([]string{"bootstrap", "-grpc", "-node-id", "echo-1", "-xds", "127.0.0.1:18000", "-mesh-cert-dir", dir, "-mesh-cert-refresh", "90s"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var b struct {
		Providers map[string]struct {
			PluginName string          `json:"plugin_name"`
			Config     json.RawMessage `json:"config"`
		} `json:"certificate_providers"`
		Template string `json:"server_listener_resource_name_template"`
	}
	if err := json.Unmarshal(out.Bytes(), &b); err != nil {
		t.Fatalf("%v\n%s", err, out.Bytes())
	}
	if b.Template != "grpc/server?xds.resource.listening_address=%s" {
		t.Errorf("server_listener_resource_name_template = %q", b.Template)
	}
	p, ok := b.Providers[xds.MeshCertProvider]
	if !ok || p.PluginName != "file_watcher" {
		t.Fatalf("certificate_providers = %s, want %q with plugin file_watcher", out.Bytes(), xds.MeshCertProvider)
	}
	if !strings.Contains(string(p.Config), `"refresh_interval": "90s"`) {
		t.Errorf("provider config %s, want refresh_interval 90s", p.Config)
	}
	if _, err := grpcxds.NewXDSResolverWithConfigForTesting(out.Bytes()); err != nil {
		t.Fatalf("grpc-go rejects the bootstrap: %v", err)
	}
	srv, err := grpcxds.NewGRPCServer(grpcxds.BootstrapContentsForTesting(out.Bytes()))
	if err != nil {
		t.Fatalf("grpc-go's xDS server rejects the bootstrap: %v", err)
	}
	srv.Stop()
	bc, err := certprovider.ParseConfig("file_watcher", json.RawMessage(p.Config))
	if err != nil {
		t.Fatalf("file_watcher rejects its config: %v", err)
	}
	prov, err := bc.Build(certprovider.BuildOptions{WantIdentity: true, WantRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	km, err := prov.KeyMaterial(ctx)
	if err != nil {
		t.Fatalf("file_watcher loads nothing from %s: %v", dir, err)
	}
	if len(km.Certs) != 1 || km.Roots == nil {
		t.Fatalf("key material: %d identities, roots %v", len(km.Certs), km.Roots != nil)
	}

	for _, args := range [][]string{
		{"bootstrap", "-node-id", "e", "-cluster", "g", "-xds", "127.0.0.1:1", "-mesh-cert-dir", dir}, // Envoy: SDS
	} {
		if code := realMain(args, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	// A relative directory is written absolute: gRPC reads the files from
	// its own working directory.
	var rel bytes.Buffer
	if code := realMain([]string{"bootstrap", "-grpc", "-node-id", "e", "-xds", "127.0.0.1:1", "-mesh-cert-dir", "relative"}, &rel, &bytes.Buffer{}); code != 0 {
		t.Fatalf("relative -mesh-cert-dir: exit %d", code)
	}
	wd, _ := os.Getwd()
	if !strings.Contains(rel.String(), `"`+filepath.Join(wd, "relative", xds.MeshCertFile)+`"`) {
		t.Errorf("relative -mesh-cert-dir not written absolute:\n%s", rel.String())
	}
}
