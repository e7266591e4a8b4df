package agent_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// TestAgentServesTerminatingGatewayLeaves: with the central bridge in
// agent mode (it holds no key), a terminating gateway registered on the
// VM's Consul agent and connected to the per-VM agent's socket by its
// service id is relayed as that gateway (the central bridge serves its
// listener, one chain per linked service) and gets from the agent the
// leaf of each linked service in connect.services, signed for that
// service, and nothing else: not the leaf of a linked service left out
// of connect.services (warned about), not a sidecar's. web's sidecar on
// the same agent gets no linked service's leaf.
func TestAgentServesTerminatingGatewayLeaves(t *testing.T) {
	ca := consultest.Start(t)
	ca.RegisterWebAPIMesh(t)
	c := ca.Client()
	for i, s := range []string{"ext1", "ext2"} {
		if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: "external", Address: "127.0.0.9",
			Service: &api.AgentService{ID: s, Service: s, Port: 7000 + i}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{Kind: api.ServiceKindTerminatingGateway, ID: "tgw", Name: "tgw", Port: 9443}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.ConfigEntries().Set(&api.TerminatingGatewayConfigEntry{Kind: api.TerminatingGateway, Name: "tgw",
		Services: []api.LinkedService{{Name: "ext1"}, {Name: "ext2"}}}, nil); err != nil {
		t.Fatal(err)
	}
	d, central := startMeshCentralDaemon(t, ca)

	var logs syncbuffer.Buffer
	ag := startAgentWith(t, t.TempDir(), func(c *agent.Config) {
		c.Upstreams = []string{central}
		c.ConsulAddress = ca.HTTPAddr()
		c.ConnectServices = []string{"web", "ext1"}
	}, &logs)
	node, err := c.Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	roots, _, err := c.Connect().CARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	td := roots.TrustDomain
	group := ir.SidecarGroupName(node, "tgw")
	leaves := func(st adsclient.State) []string {
		var out []string
		for _, n := range st.SecretNames() {
			if strings.HasPrefix(n, ir.LeafSecretPrefix) {
				out = append(out, strings.TrimPrefix(n, ir.LeafSecretPrefix))
			}
		}
		return out
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	gw, err := adsclient.Dial(wctx, adsclient.Config{Addr: "unix://" + ag.SocketAddr().String(), NodeID: "tgw", Cluster: "tgw", Mode: adsclient.Delta, InitialFetchTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	st, err := gw.Wait(wctx, func(s adsclient.State) bool {
		l := s.Listener(ir.GatewayListenerName(group))
		return l != nil && len(l.GetFilterChains()) == 3 && s.Secret(ir.LeafSecretPrefix+"ext1") != nil && s.Secret(ir.RootsSecretName) != nil
	})
	if err != nil {
		t.Fatalf("waiting for the gateway through the agent: %v; have %v", err, gw.Snapshot())
	}
	for _, fc := range st.Listener(ir.GatewayListenerName(group)).GetFilterChains()[:2] {
		if sn := fc.GetFilterChainMatch().GetServerNames(); len(sn) != 1 || !strings.HasSuffix(sn[0], ".default.dc1.internal."+td) {
			t.Errorf("chain server names %v", sn)
		}
	}
	if got := leaves(st); !slices.Equal(got, []string{"ext1"}) {
		t.Errorf("gateway leaves %v, want ext1 only (ext2 is not in connect.services)", got)
	}
	consultest.VerifyConnectLeaf(t, []byte(st.Secret(ir.LeafSecretPrefix+"ext1").GetTlsCertificate().GetCertificateChain().GetInlineString()), roots, ir.SPIFFEID(td, "dc1", "ext1"))
	// Asked for by name, the gateway gets its linked service's leaf and
	// the roots, not ext2's (not in connect.services) nor web's.
	asked := []string{ir.LeafSecretPrefix + "ext1", ir.LeafSecretPrefix + "ext2", ir.LeafSecretPrefix + "web", ir.RootsSecretName}
	if ans := askSecrets("unix://"+ag.SocketAddr().String(), "tgw", "tgw", asked, 3*time.Second); !slices.Equal(ans.Got, []string{ir.LeafSecretPrefix + "ext1", ir.RootsSecretName}) {
		t.Errorf("gateway asking by name got %+v", ans)
	}
	if !strings.Contains(logs.String(), `"proxy_id":"tgw","service":"ext2"`) {
		t.Errorf("no warning about ext2's leaf:\n%s", logs.String())
	}

	web, err := adsclient.Dial(wctx, adsclient.Config{Addr: "unix://" + ag.SocketAddr().String(), NodeID: "web-sidecar-proxy", Cluster: "web", Mode: adsclient.Delta})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = web.Close() })
	ws, err := web.Wait(wctx, func(s adsclient.State) bool { return s.Secret(ir.LeafSecretPrefix+"web") != nil })
	if err != nil {
		t.Fatal(err)
	}
	if got := leaves(ws); !slices.Equal(got, []string{"web"}) {
		t.Errorf("web's sidecar leaves %v, want web only", got)
	}

	// The central bridge knows the relayed stream as the gateway.
	resp, err := centralAdminGet(d, "/v1/proxies")
	if err != nil {
		t.Fatal(err)
	}
	var proxies []serve.ProxyStatus
	err = json.NewDecoder(resp.Body).Decode(&proxies)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(proxies, func(p serve.ProxyStatus) bool { return p.NodeID == "tgw" })
	if i < 0 || proxies[i].Group != group || proxies[i].Sidecar == nil || proxies[i].Sidecar.Kind != "terminating-gateway" {
		t.Fatalf("central /v1/proxies: %+v", proxies)
	}
}
