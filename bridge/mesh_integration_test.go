package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// startMeshBridge starts a bridge on agent with the policy file
// policyHCL; adjust, if any, changes its settings further.
func startMeshBridge(t *testing.T, agent *consultest.Agent, policyHCL string, adjust ...func(*bridge.Config)) *harness {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte(policyHCL), 0o644); err != nil {
		t.Fatal(err)
	}
	return startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
		for _, a := range adjust {
			a(c)
		}
	})
}

// proxyService is the catalog entry of a registered sidecar.
func proxyService(t *testing.T, agent *consultest.Agent, id string) *api.CatalogService {
	t.Helper()
	svcs, _, err := agent.Client().Catalog().Service(id, "", nil)
	if err != nil || len(svcs) != 1 {
		t.Fatalf("catalog %s: %v %v", id, svcs, err)
	}
	return svcs[0]
}

// TestMeshSidecarFromRegistration: against a real Consul -dev, an
// Envoy-like client whose node id is web's sidecar id receives the public
// listener on the sidecar's port, the upstream listener on 9191, the api
// mesh cluster (Consul's name and SNI, api's SPIFFE id as SAN) whose
// endpoints are api's sidecars, and in central mode web's leaf over SDS,
// carrying web's SPIFFE id and chaining to Consul's root; a new
// intention changes the public listener's RBAC within a second.
func TestMeshSidecarFromRegistration(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterWebAPIMesh(t)
	h := startMeshBridge(t, agent, "mesh {\n  mode = \"central\"\n}\n")
	roots, _, err := agent.Client().Connect().CARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	td := roots.TrustDomain
	web, apiProxy := proxyService(t, agent, "web-sidecar-proxy"), proxyService(t, agent, "api-sidecar-proxy")
	group := ir.SidecarGroupName(web.Node, "web-sidecar-proxy")
	public, upstream := ir.PublicListenerName(group), group+".upstream.api"
	mc := ir.MeshClusterName("api", "dc1", td)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: "web-sidecar-proxy", Cluster: "web"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	st, err := c.Wait(ctx, func(s adsclient.State) bool {
		return s.Listener(public) != nil && s.Listener(upstream) != nil && len(s.Endpoints(mc)) > 0 && s.Secret(ir.LeafSecretPrefix+"web") != nil
	})
	if err != nil {
		t.Fatalf("waiting for web's sidecar config: %v; have %v", err, c.Snapshot())
	}
	if got := st.Listener(public).GetAddress().GetSocketAddress().GetPortValue(); got != uint32(web.ServicePort) {
		t.Errorf("public listener port %d, want the sidecar's %d", got, web.ServicePort)
	}
	if got := st.Listener(upstream).GetAddress().GetSocketAddress().GetPortValue(); got != 9191 {
		t.Errorf("upstream listener port %d, want 9191", got)
	}
	eps := st.Endpoints(mc)
	if want := fmt.Sprintf("%s:%d", apiProxy.Address, apiProxy.ServicePort); len(eps) != 1 || eps[0].Address != want {
		t.Errorf("api mesh endpoints %v, want api's sidecar %s", eps, want)
	}
	cl, _ := protojson.Marshal(st.Cluster(mc))
	for _, want := range []string{`"sni":"` + mc + `"`, ir.SPIFFEID(td, "dc1", "api")} {
		if !strings.Contains(string(cl), want) {
			t.Errorf("mesh cluster lacks %s: %s", want, cl)
		}
	}
	// Only web's leaf: the client holds no other service's key.
	for _, n := range st.SecretNames() {
		if strings.HasPrefix(n, ir.LeafSecretPrefix) && n != ir.LeafSecretPrefix+"web" {
			t.Errorf("web's sidecar was served %s", n)
		}
	}
	verifyLeaf(t, st, roots, ir.SPIFFEID(td, "dc1", "web"))

	// /v1/proxies shows the sidecar's destination and upstreams.
	resp, err := adminGet("http://" + h.daemon.AdminAddr().String() + "/v1/proxies")
	if err != nil {
		t.Fatal(err)
	}
	var proxies []serve.ProxyStatus
	err = json.NewDecoder(resp.Body).Decode(&proxies)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(proxies, func(p serve.ProxyStatus) bool { return p.NodeID == "web-sidecar-proxy" })
	if i < 0 || proxies[i].Sidecar == nil || proxies[i].Sidecar.Service != "web" || !slices.Equal(proxies[i].Sidecar.Upstreams, []string{"api@127.0.0.1:9191"}) {
		t.Errorf("/v1/proxies: %+v", proxies)
	}

	// An intention for web reaches its public listener's RBAC in < 1s.
	before, _ := protojson.Marshal(st.Listener(public))
	src := ir.SPIFFEID(td, "dc1", "api")
	if strings.Contains(string(before), "svc/api") {
		t.Fatalf("RBAC names api before any intention: %s", before)
	}
	if _, _, err := agent.Client().ConfigEntries().Set(&api.ServiceIntentionsConfigEntry{Kind: api.ServiceIntentions, Name: "web",
		Sources: []*api.SourceIntention{{Name: "api", Action: api.IntentionActionDeny}}}, nil); err != nil {
		t.Fatal(err)
	}
	wrote := time.Now()
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	_, err = c.Wait(wctx, func(s adsclient.State) bool {
		b, _ := protojson.Marshal(s.Listener(public))
		return strings.Contains(string(b), strings.TrimPrefix(src, "spiffe://")) || strings.Contains(string(b), "svc/api")
	})
	took := time.Since(wrote)
	if err != nil {
		t.Fatalf("intention not in the RBAC after 5s: %v", err)
	}
	t.Logf("intention write to RBAC update: %s", took)
	if took > time.Second {
		t.Errorf("intention took %s to reach the RBAC filter, want < 1s", took)
	}
}

// verifyLeaf checks the SDS leaf: its certificate carries uri and
// chains to one of Consul's roots.
func verifyLeaf(t *testing.T, st adsclient.State, roots *api.CARootList, uri string) {
	t.Helper()
	sec := st.Secret(ir.LeafSecretPrefix + "web")
	if sec.GetTlsCertificate().GetCertificateChain().GetInlineString() == "" || sec.GetTlsCertificate().GetPrivateKey().GetInlineString() == "" {
		t.Fatalf("leaf secret without certificate or key")
	}
	consultest.VerifyConnectLeaf(t, []byte(sec.GetTlsCertificate().GetCertificateChain().GetInlineString()), roots, uri)
}

// TestMeshSidecarRegisteredWhileConnected: an Envoy that connects before
// its sidecar is registered is not left on the wrong world: once the
// registration is served its stream is closed with Unavailable, and the
// reconnection gets the sidecar's listeners.
func TestMeshSidecarRegisteredWhileConnected(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterWebAPIMesh(t)
	h := startMeshBridge(t, agent, "mesh {}\n")
	cfg := adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: "db-sidecar-proxy", Cluster: "db", InitialFetchTimeout: -1}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Wait(ctx, func(s adsclient.State) bool { return len(s.ClusterNames()) > 0 }); err != nil {
		t.Fatal(err)
	}
	if err := agent.Client().Agent().ServiceRegister(&api.AgentServiceRegistration{Name: "db", Port: 5432,
		Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}}); err != nil {
		t.Fatal(err)
	}
	registered := time.Now()
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the stream of a node that became a sidecar was not closed")
	}
	if !strings.Contains(fmt.Sprint(c.Err()), "code = "+codes.Unavailable.String()) {
		t.Fatalf("stream ended with %v, want Unavailable", c.Err())
	}
	c, err = adsclient.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	db := proxyService(t, agent, "db-sidecar-proxy")
	public := ir.PublicListenerName(ir.SidecarGroupName(db.Node, "db-sidecar-proxy"))
	if _, err := c.Wait(ctx, func(s adsclient.State) bool { return s.Listener(public) != nil }); err != nil {
		t.Fatalf("reconnected sidecar: %v", err)
	}
	t.Logf("registration to the sidecar's public listener (close, reconnect included): %s", time.Since(registered))
}
