package bridge_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestTerminatingGatewayCentralKeys: in central mode the bridge serves
// the terminating gateway (keyed by its service id) the leaves of the
// services it links, each signed by Consul's CA for that service, and
// the roots; no other leaf. A sidecar gets none of the linked services'
// leaves. A service linked while the gateway is connected gets its chain
// and its leaf without a restart (the mesh watcher follows its leaf once
// the entry names it).
func TestTerminatingGatewayCentralKeys(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterWebAPIMesh(t)
	registerTerminatingGateway(t, agent)
	h := startMeshBridge(t, agent, "mesh {\n  mode = \"central\"\n}\n")
	roots, _, err := agent.Client().Connect().CARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	td := roots.TrustDomain
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw, err := adsclient.Dial(ctx, adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: "tgw", Cluster: "tgw", Mode: adsclient.Delta})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	leaves := func(s adsclient.State) []string {
		var out []string
		for _, n := range s.SecretNames() {
			if strings.HasPrefix(n, ir.LeafSecretPrefix) {
				out = append(out, strings.TrimPrefix(n, ir.LeafSecretPrefix))
			}
		}
		return out
	}
	st, err := gw.Wait(ctx, func(s adsclient.State) bool { return len(gatewayViewOf(s).chains) == 2 && len(leaves(s)) == 2 })
	if err != nil {
		t.Fatalf("gateway: %v", err)
	}
	if got := leaves(st); !slices.Equal(got, []string{"ext1", "ext2"}) {
		t.Errorf("gateway leaves %v, want ext1 and ext2 only", got)
	}
	if st.Secret(ir.RootsSecretName) == nil {
		t.Error("gateway has no roots")
	}
	for _, s := range []string{"ext1", "ext2"} {
		sec := st.Secret(ir.LeafSecretPrefix + s)
		if sec.GetTlsCertificate().GetPrivateKey().GetInlineString() == "" {
			t.Fatalf("%s: leaf without key", s)
		}
		consultest.VerifyConnectLeaf(t, []byte(sec.GetTlsCertificate().GetCertificateChain().GetInlineString()), roots, ir.SPIFFEID(td, "dc1", s))
	}

	web, err := adsclient.Dial(ctx, adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: "web-sidecar-proxy", Cluster: "web", Mode: adsclient.Delta})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = web.Close() })
	ws, err := web.Wait(ctx, func(s adsclient.State) bool { return len(leaves(s)) > 0 })
	if err != nil {
		t.Fatal(err)
	}
	if got := leaves(ws); !slices.Equal(got, []string{"web"}) {
		t.Errorf("web's sidecar leaves %v, want web only", got)
	}

	// Link ext3 while the gateway is connected.
	c := agent.Client()
	if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: "external", Address: "127.0.0.9",
		Service: &api.AgentService{ID: "ext3", Service: "ext3", Port: 7003}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.ConfigEntries().Set(&api.TerminatingGatewayConfigEntry{Kind: api.TerminatingGateway, Name: "tgw", Services: []api.LinkedService{
		{Name: "ext1"}, {Name: "ext2", CAFile: "/etc/tgw/ext2-ca.pem", SNI: "ext2.example.com"}, {Name: "ext3"},
	}}, nil); err != nil {
		t.Fatal(err)
	}
	st, err = gw.Wait(ctx, func(s adsclient.State) bool {
		return len(gatewayViewOf(s).chains) == 3 && slices.Contains(leaves(s), "ext3")
	})
	if err != nil {
		t.Fatalf("ext3 linked: %v", err)
	}
	consultest.VerifyConnectLeaf(t, []byte(st.Secret(ir.LeafSecretPrefix+"ext3").GetTlsCertificate().GetCertificateChain().GetInlineString()), roots, ir.SPIFFEID(td, "dc1", "ext3"))
}
