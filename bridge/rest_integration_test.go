package bridge_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/testpki"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

const restPolicy = `
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
`

// TestRESTAndGRPCServeIdenticalContent: on one TLS port with client
// certificates and authorize_nodes, a REST-JSON poller and a gRPC ADS
// client of the same group get the same resources at the same versions
// for every type; a poll at the current version is 304; a policy change
// is on the next poll; and a REST request for a node the certificate does
// not authorize is refused like a gRPC stream.
func TestRESTAndGRPCServeIdenticalContent(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	agent.RegisterTTL(t, "web", "web-2", 1002, nil, nil)
	dir := t.TempDir()
	ca := testpki.New(t)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	srvCert, srvKey := ca.Issue(testpki.Leaf{DNS: []string{"bridge.internal"}})
	cliCert, cliKey := ca.Issue(testpki.Leaf{URIs: []string{"spiffe://test/group/edge"}})
	file := write("policy.hcl", []byte(restPolicy))
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
		c.Settings.XDS.TLS.CertFile, c.Settings.XDS.TLS.KeyFile = write("srv.pem", srvCert), write("srv-key.pem", srvKey)
		c.Settings.XDS.TLS.ClientCAFile = write("ca.pem", ca.PEM)
		c.Settings.XDS.AuthorizeNodes = true
	})
	pair, err := tls.X509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	clientTLS := func(protos ...string) *tls.Config {
		return &tls.Config{RootCAs: roots, ServerName: "bridge.internal", Certificates: []tls.Certificate{pair}, NextProtos: protos}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	grpcc, err := adsclient.Dial(ctx, adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: "edge-grpc", Cluster: "edge", TLS: clientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer grpcc.Close()
	waitEndpoints(t, "web", join(ep(1001, "HEALTHY"), ep(1002, "HEALTHY")), grpcc)

	// HTTP/1.1, as Envoy's REST subscriptions speak it.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS("http/1.1")}}
	base := "https://" + h.daemon.XDSAddr().String()
	node := &corev3.Node{Id: "edge-rest", Cluster: "edge", UserAgentName: "envoy"}
	fetch := func(typeURL, version string, names ...string) *adsclient.RESTResult {
		t.Helper()
		r, err := adsclient.FetchREST(ctx, hc, base, typeURL, node, version, names...)
		if err != nil {
			t.Fatalf("REST %s: %v", typeURL, err)
		}
		return r
	}
	grpcState, err := grpcc.Wait(ctx, func(s adsclient.State) bool {
		return s.Listener("edge.http") != nil && s.RouteConfig("edge.http") != nil && len(s.Endpoints("web")) == 2
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{adsclient.ClusterType, adsclient.EndpointType, adsclient.ListenerType, adsclient.RouteType} {
		var names []string
		if typ == adsclient.EndpointType || typ == adsclient.RouteType {
			names = grpcState.Names(typ) // what the ADS client subscribed to
		}
		r := fetch(typ, "", names...)
		want := grpcState.Types[typ]
		if r.Status != http.StatusOK || r.Version != want.Version {
			t.Fatalf("REST %s: status %d version %q (%s), gRPC has version %q", typ, r.Status, r.Version, r.Body, want.Version)
		}
		if got, wantNames := mapsKeys(r.Resources), grpcState.Names(typ); !slices.Equal(got, wantNames) || len(got) == 0 {
			t.Fatalf("REST %s names %v, gRPC %v", typ, got, wantNames)
		}
		for name, m := range r.Resources {
			if !proto.Equal(m, want.Resources[name]) {
				t.Errorf("REST %s %q differs from gRPC's", typ, name)
			}
		}
		if nm := fetch(typ, r.Version, names...); nm.Status != http.StatusNotModified {
			t.Errorf("REST %s at the current version: status %d, want 304", typ, nm.Status)
		}
	}

	// A policy change is on the next poll, at the version gRPC gets.
	lds := fetch(adsclient.ListenerType, "")
	changed := strings.Replace(restPolicy, "proxy \"edge\" {\n", "proxy \"edge\" {\n  listener \"admin\" {\n    port = 9090\n    virtual_host \"all\" {\n      route {\n        service = \"web\"\n      }\n    }\n  }\n", 1)
	write("policy.hcl", []byte(changed))
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := fetch(adsclient.ListenerType, lds.Version)
		if r.Status == http.StatusOK {
			if _, ok := r.Resources["edge.admin"]; !ok {
				t.Fatalf("new LDS version %s lacks edge.admin: %v", r.Version, mapsKeys(r.Resources))
			}
			st, err := grpcc.Wait(ctx, func(s adsclient.State) bool { return s.Listener("edge.admin") != nil })
			if err != nil || st.Version(adsclient.ListenerType) != r.Version {
				t.Fatalf("gRPC LDS version %q, REST %q (%v)", st.Version(adsclient.ListenerType), r.Version, err)
			}
			break
		}
		if r.Status != http.StatusNotModified || time.Now().After(deadline) {
			t.Fatalf("REST LDS after the policy change: status %d %s", r.Status, r.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// authorize_nodes: the certificate names group edge only.
	other := &corev3.Node{Id: "x", Cluster: "payments"}
	r, err := adsclient.FetchREST(ctx, hc, base, adsclient.ClusterType, other, "")
	if err != nil || r.Status != http.StatusForbidden {
		t.Fatalf("REST for a node the certificate does not authorize: %+v %v, want 403", r, err)
	}
	if r, err := adsclient.FetchREST(ctx, hc, base, adsclient.ClusterType, nil, ""); err != nil || r.Status != http.StatusBadRequest {
		t.Fatalf("REST without a node: %+v %v, want 400", r, err)
	}
	noCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "bridge.internal"}}}
	if r, err := adsclient.FetchREST(ctx, noCert, base, adsclient.ClusterType, node, ""); err == nil {
		t.Fatalf("REST without a client certificate answered %d", r.Status)
	}
}

func mapsKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
