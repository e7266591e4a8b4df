package xds_test

import (
	"context"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/intention"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestTerminatingGatewayRBACDecidesLikeConsul: with intentions written to
// a real Consul (ext1: web allowed, ops denied; ext2 (http): web may GET
// /status only, everyone else denied by "*"), the chains Consul 1.15.4's
// own xDS server gives a terminating gateway and the bridge's chains
// (from the same entries, read back and resolved by package intention)
// let in exactly the same callers and requests; the bridge's decisions
// are those of intention.Decide; and the sample covers both an allow and
// a deny on each chain.
func TestTerminatingGatewayRBACDecidesLikeConsul(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Consul agent")
	}
	a := consultest.Start(t)
	c := a.Client()
	allow, deny := api.IntentionActionAllow, api.IntentionActionDeny
	for _, e := range []api.ConfigEntry{
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "ext2", Protocol: "http"},
		&api.TerminatingGatewayConfigEntry{Kind: api.TerminatingGateway, Name: "tgw", Services: []api.LinkedService{{Name: "ext1"}, {Name: "ext2"}}},
		&api.ServiceIntentionsConfigEntry{Kind: api.ServiceIntentions, Name: "ext1", Sources: []*api.SourceIntention{
			{Name: "web", Action: allow}, {Name: "ops", Action: deny},
		}},
		&api.ServiceIntentionsConfigEntry{Kind: api.ServiceIntentions, Name: "ext2", Sources: []*api.SourceIntention{
			{Name: "web", Permissions: []*api.IntentionPermission{{Action: allow, HTTP: &api.IntentionHTTPPermission{PathExact: "/status", Methods: []string{"GET"}}}}},
			{Name: "*", Action: deny},
		}},
	} {
		if _, _, err := c.ConfigEntries().Set(e, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range []string{"ext1", "ext2"} {
		if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: "external", Address: "127.0.0.9",
			Service: &api.AgentService{ID: s, Service: s, Port: 7000 + i}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{Kind: api.ServiceKindTerminatingGateway, ID: "tgw", Name: "tgw", Port: 9443}); err != nil {
		t.Fatal(err)
	}
	roots, _, err := c.Connect().CARoots(nil)
	if err != nil || roots.TrustDomain == "" {
		t.Fatalf("CA roots: %v", err)
	}
	td := roots.TrustDomain
	sni := func(s string) string { return ir.MeshClusterName(s, "dc1", td) }

	// Consul's gateway listener, once both chains carry their intentions.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := adsclient.Dial(ctx, adsclient.Config{Addr: a.GRPCAddr(), NodeID: "tgw", Cluster: "tgw", Mode: adsclient.Delta, InitialFetchTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	chainsOf := func(l *listenerv3.Listener) map[string]*listenerv3.FilterChain {
		out := map[string]*listenerv3.FilterChain{}
		for _, fc := range l.GetFilterChains() {
			if sn := fc.GetFilterChainMatch().GetServerNames(); len(sn) == 1 {
				out[sn[0]] = fc
			}
		}
		return out
	}
	var theirs map[string]*listenerv3.FilterChain
	if _, err := cl.Wait(ctx, func(s adsclient.State) bool {
		for _, n := range s.ListenerNames() {
			ch := chainsOf(s.Listener(n))
			e1, e2 := ch[sni("ext1")], ch[sni("ext2")]
			if e1 == nil || e2 == nil || len(e2.GetFilters()) != 1 {
				continue
			}
			// Ready: ops is denied on ext1, and other (by "*") on ext2.
			if !rbacAllows(t, chainRBAC(t, e1), ir.SPIFFEID(td, "dc1", "ops"), intention.Request{Source: "ops"}) &&
				!rbacAllows(t, chainRBAC(t, e2), ir.SPIFFEID(td, "dc1", "other"), intention.Request{Source: "other", Method: "GET", Path: "/status"}) {
				theirs = ch
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("Consul's gateway listener: %v", err)
	}

	// The bridge's chains from the same entries, as Consul returns them.
	var entries []intention.Entry
	for _, name := range []string{"ext1", "ext2"} {
		e, _, err := c.ConfigEntries().Get(api.ServiceIntentions, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, intention.FromConfigEntry(e.(*api.ServiceIntentionsConfigEntry)))
	}
	m := gatewayModel()
	gw := m.Groups[0].Gateway
	for i, s := range []string{"ext2", "ext1"} { // sorted by SNI, as gatewayModel's
		in, err := intention.Resolve(entries, s, ir.IntentionAllow) // Consul without ACLs: allow
		if err != nil {
			t.Fatal(err)
		}
		gw.Chains[i].Intentions = in
	}
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	l := listenerNamed(t, out.Groups[m.Groups[0].Name], ir.GatewayListenerName(m.Groups[0].Name))
	ours := map[string]*listenerv3.FilterChain{"ext2": l.GetFilterChains()[0], "ext1": l.GetFilterChains()[1]}

	for i, s := range []string{"ext2", "ext1"} {
		allowed, denied := 0, 0
		for _, src := range []string{"web", "ops", "other"} {
			for _, req := range []intention.Request{{Method: "GET", Path: "/status"}, {Method: "POST", Path: "/status"}, {Method: "GET", Path: "/admin"}} {
				req.Source = src
				spiffe := ir.SPIFFEID(td, "dc1", src)
				want := rbacAllows(t, chainRBAC(t, theirs[sni(s)]), spiffe, req)
				if got := rbacAllows(t, chainRBAC(t, ours[s]), spiffe, req); got != want {
					t.Errorf("%s: %s %s %s: bridge allows=%v, Consul allows=%v", s, src, req.Method, req.Path, got, want)
				}
				if ref := intention.Decide(gw.Chains[i].Intentions, req) == ir.IntentionAllow; ref != want {
					t.Errorf("%s: %s %s %s: intention.Decide allows=%v, Consul allows=%v", s, src, req.Method, req.Path, ref, want)
				}
				if want {
					allowed++
				} else {
					denied++
				}
			}
		}
		if allowed == 0 || denied == 0 {
			t.Errorf("%s: %d allowed, %d denied: the sample must hold both", s, allowed, denied)
		}
	}
}
