package bridge_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/testpki"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// scopePolicy: group web routes to web and billing (whose upstream mTLS
// makes secrets billing/ca and billing/cert); group edge routes to api
// (and, with extra, to pay). The two sets are disjoint.
func scopePolicy(extra string) string {
	return `
service "billing" {
  tls {
    sni       = "billing.internal"
    ca_file   = "tls/ca.pem"
    cert_file = "tls/client.pem"
    key_file  = "tls/client-key.pem"
  }
}

proxy "web" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        match {
          path_prefix = "/billing/"
        }
        service = "billing"
      }
      route {
        service = "web"
      }
    }
  }
}

proxy "edge" {
  listener "http" {
    port = 8081
    virtual_host "all" {` + extra + `
      route {
        service = "api"
      }
    }
  }
}
`
}

const payRoute = `
      route {
        match {
          path_prefix = "/pay/"
        }
        service = "pay"
      }`

// TestEachGroupGetsOnlyWhatItReaches follows issue 16's acceptance with a
// real Consul, xDS over mTLS and authorize_nodes: each group's proxies,
// SotW and delta, hold only their clusters, endpoints and secrets, and so
// does /v1/config_dump; a node in no group gets nothing (NO_GROUP); a
// route added to edge sends the new cluster to edge's proxies only; an
// edge node asking by name for the web group's secret receives nothing,
// and the refusal is counted.
func TestEachGroupGetsOnlyWhatItReaches(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	agent.RegisterTTL(t, "billing", "billing-1", 3001, nil, nil)
	agent.RegisterTTL(t, "api", "api-1", 2001, nil, nil)
	agent.RegisterTTL(t, "pay", "pay-1", 4001, nil, nil)

	ca := testpki.New(t)
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls")
	if err := os.Mkdir(tlsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		t.Helper()
		testpki.ReplaceFile(t, filepath.Join(tlsDir, name), b, 0o600)
	}
	clientCert, clientKey := ca.Issue(testpki.Leaf{DNS: []string{"billing.client"}})
	srvCert, srvKey := ca.Issue(testpki.Leaf{DNS: []string{"bridge.test"}})
	write("client.pem", clientCert)
	write("client-key.pem", clientKey)
	write("ca.pem", ca.PEM)
	write("server.pem", srvCert)
	write("server-key.pem", srvKey)
	file := filepath.Join(dir, "policy.hcl")
	if err := os.WriteFile(file, []byte(scopePolicy("")), 0o644); err != nil {
		t.Fatal(err)
	}
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	h := startBridgeWith(t, agent, fwd, func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
		c.Settings.XDS.TLS = policy.TLSFiles{CertFile: filepath.Join(tlsDir, "server.pem"), KeyFile: filepath.Join(tlsDir, "server-key.pem"), ClientCAFile: filepath.Join(tlsDir, "ca.pem")}
		c.Settings.XDS.AuthorizeNodes = true
	})
	clientTLS := func(group string) *tls.Config {
		cert, key := ca.Issue(testpki.Leaf{DNS: []string{group}})
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca.PEM)
		return &tls.Config{RootCAs: pool, ServerName: "bridge.test", Certificates: []tls.Certificate{pair}}
	}
	connect := func(group string, mode adsclient.Mode) *adsclient.Client {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: group + "-" + mode.String(), Cluster: group, Mode: mode, TLS: clientTLS(group)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	wait := func(c *adsclient.Client, what string, pred func(adsclient.State) bool) adsclient.State {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		st, err := c.Wait(ctx, pred)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		return st
	}
	type want struct{ clusters, secrets []string }
	groups := map[string]want{
		"web":  {[]string{"billing", "web"}, []string{"billing/ca", "billing/cert"}},
		"edge": {[]string{"api"}, nil},
	}
	var edgeClients, webClients []*adsclient.Client
	for _, mode := range []adsclient.Mode{adsclient.SotW, adsclient.Delta} {
		for _, g := range []string{"web", "edge"} {
			c := connect(g, mode)
			w := groups[g]
			st := wait(c, g+" "+mode.String()+" state", func(s adsclient.State) bool {
				return s.RouteConfig(g+".http") != nil && len(s.Endpoints(w.clusters[0])) == 1 && len(s.SecretNames()) == len(w.secrets)
			})
			if got := st.ClusterNames(); !slices.Equal(got, w.clusters) {
				t.Errorf("%s (%s) clusters = %v, want %v", g, mode, got, w.clusters)
			}
			if got := st.LoadAssignmentNames(); !slices.Equal(got, w.clusters) {
				t.Errorf("%s (%s) endpoints = %v, want %v", g, mode, got, w.clusters)
			}
			if got := st.SecretNames(); !slices.Equal(got, w.secrets) {
				t.Errorf("%s (%s) secrets = %v, want %v", g, mode, got, w.secrets)
			}
			if g == "edge" {
				edgeClients = append(edgeClients, c)
			} else {
				webClients = append(webClients, c)
			}
		}
	}
	base := "http://" + h.daemon.AdminAddr().String()
	for g, w := range groups {
		code, body := get(t, base+"/v1/config_dump?node="+g+"-sotw")
		if code != http.StatusOK {
			t.Fatalf("config_dump %s: %d %s", g, code, body)
		}
		var d struct {
			Clusters, Endpoints, Secrets []struct {
				Name        string `json:"name"`
				ClusterName string `json:"cluster_name"`
			}
		}
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			t.Fatal(err)
		}
		var clusters, endpoints, secrets []string
		for _, c := range d.Clusters {
			clusters = append(clusters, c.Name)
		}
		for _, e := range d.Endpoints {
			endpoints = append(endpoints, e.ClusterName)
		}
		for _, s := range d.Secrets {
			secrets = append(secrets, s.Name)
		}
		if !slices.Equal(clusters, w.clusters) || !slices.Equal(endpoints, w.clusters) || !slices.Equal(secrets, w.secrets) {
			t.Errorf("config_dump of %s: clusters %v endpoints %v secrets %v, want %v and %v", g, clusters, endpoints, secrets, w.clusters, w.secrets)
		}
	}

	// A node in no group: an answer with nothing in it, and NO_GROUP.
	stray := connect("stray", adsclient.SotW)
	wait(stray, "an empty answer", func(s adsclient.State) bool { return s.Version(adsclient.ClusterType) != "" })
	time.Sleep(200 * time.Millisecond)
	if st := stray.Snapshot(); len(st.ClusterNames())+len(st.ListenerNames())+len(st.SecretNames())+len(st.LoadAssignmentNames()) > 0 {
		t.Errorf("a node in no group got %v", st)
	}
	_, body := get(t, base+"/v1/proxies")
	var proxies []serve.ProxyStatus
	if err := json.Unmarshal([]byte(body), &proxies); err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		if (p.NodeID == "stray-sotw") != (p.Status == serve.StatusNoGroup) {
			t.Errorf("/v1/proxies: %s is %s", p.NodeID, p.Status)
		}
	}

	// An edge node asking by name for the web group's secret (and its
	// clusters' endpoints) gets nothing for those names.
	refusedBefore := metricValue(scrape(t, base), `consul_xds_bridge_refused_resources_total{type="SDS"}`)
	for typ, name := range map[string]string{adsclient.SecretType: "billing/cert", adsclient.EndpointType: "billing"} {
		if n := askByName(t, h.daemon.XDSAddr().String(), clientTLS("edge"), "edge", typ, name); n > 0 {
			t.Errorf("an edge node asking for %s %q got %d resources", typ, name, n)
		}
	}
	if got := metricValue(scrape(t, base), `consul_xds_bridge_refused_resources_total{type="SDS"}`); got != refusedBefore+1 {
		t.Errorf("SDS refusals %v -> %v, want one more", refusedBefore, got)
	}

	// A route added to edge: edge's proxies get cluster pay; web's get no
	// CDS response at all.
	webCDS := make([]int, len(webClients))
	for i, c := range webClients {
		webCDS[i] = c.Stats().Responses[adsclient.ClusterType]
	}
	if err := os.WriteFile(file, []byte(scopePolicy(payRoute)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range edgeClients {
		wait(c, "edge gets pay", func(s adsclient.State) bool {
			return slices.Equal(s.ClusterNames(), []string{"api", "pay"}) && len(s.Endpoints("pay")) == 1
		})
	}
	time.Sleep(500 * time.Millisecond)
	for i, c := range webClients {
		if n := c.Stats().Responses[adsclient.ClusterType]; n != webCDS[i] {
			t.Errorf("a web proxy got %d CDS responses for a change to edge", n-webCDS[i])
		}
		if got := c.Snapshot().ClusterNames(); !slices.Equal(got, groups["web"].clusters) {
			t.Errorf("web clusters after edge's change = %v", got)
		}
	}
}

func scrape(t *testing.T, base string) string {
	t.Helper()
	_, body := get(t, base+"/metrics")
	return body
}

// askByName opens a raw ADS stream as node.cluster group and asks for
// one resource by name; it returns how many resources came back within a
// second (the first request of a type is answered, possibly empty).
func askByName(t *testing.T, addr string, cfg *tls.Config, group, typeURL, name string) int {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: group + "-raw", Cluster: group}, TypeUrl: typeURL, ResourceNames: []string{name}}); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 1)
	go func() {
		n := 0
		for {
			r, err := stream.Recv()
			if err != nil {
				break
			}
			for _, a := range r.GetResources() {
				if strings.Contains(string(a.GetValue()), name) {
					n++
				}
			}
			if n > 0 {
				break
			}
		}
		got <- n
	}()
	select {
	case n := <-got:
		return n
	case <-time.After(time.Second):
		return 0
	}
}
