package xds_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetworkv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/intention"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

const gwTD = "11111111-2222-3333-4444-555555555555.consul"

// gatewayModel is a terminating gateway linking db (tcp; web allowed, ops
// denied, others by the default deny) and billing (http; web may GET
// only), billing over TLS from files.
func gatewayModel() *ir.Model {
	db, billing := ir.MeshClusterName("db", "dc1", gwTD), ir.MeshClusterName("billing", "dc1", gwTD)
	ep := func(port uint32) []ir.Endpoint {
		return []ir.Endpoint{{Address: netip.MustParseAddr("192.0.2.9"), Port: port, Health: ir.Healthy, Weight: 1}}
	}
	group := ir.SidecarGroupName("vm-c", "tgw-1")
	return &ir.Model{
		Mesh: &ir.Mesh{TrustDomain: gwTD},
		Clusters: []*ir.Cluster{
			{Name: billing, Service: "billing", ConnectTimeout: time.Second, Endpoints: ep(443), TLS: &ir.UpstreamTLS{SNI: "billing.example.com", Files: &ir.TLSFiles{CA: "/etc/tgw/ca.pem", Cert: "/etc/tgw/c.pem", Key: "/etc/tgw/k.pem"}}},
			{Name: db, Service: "db", ConnectTimeout: time.Second, Endpoints: ep(5432)},
		},
		Groups: []ir.Group{{
			Name: group, Clusters: []string{billing, db},
			Gateway: &ir.Gateway{Kind: ir.GatewayTerminating, ProxyID: "tgw-1", Node: "vm-c", Service: "tgw", Datacenter: "dc1", Address: "0.0.0.0", Port: 9443,
				Chains: []ir.GatewayChain{
					{SNI: billing, Service: "billing", Cluster: billing, Protocol: "http", CertificateSecret: ir.LeafSecretPrefix + "billing",
						Intentions: ir.Intentions{Default: ir.IntentionDeny, Rules: []ir.IntentionRule{{Source: "web", Permissions: []ir.IntentionPermission{{Action: ir.IntentionAllow, Methods: []string{"GET"}}}}}}},
					{SNI: db, Service: "db", Cluster: db, Protocol: "tcp", CertificateSecret: ir.LeafSecretPrefix + "db",
						Intentions: ir.Intentions{Default: ir.IntentionDeny, Rules: []ir.IntentionRule{{Source: "web", Action: ir.IntentionAllow}, {Source: "ops", Action: ir.IntentionDeny}}}},
				}},
		}},
	}
}

func chainRBAC(t *testing.T, fc *listenerv3.FilterChain) *rbacv3.RBAC {
	t.Helper()
	for _, f := range fc.GetFilters() {
		switch f.GetName() {
		case "envoy.filters.network.rbac":
			cfg := &rbacnetworkv3.RBAC{}
			if err := f.GetTypedConfig().UnmarshalTo(cfg); err != nil {
				t.Fatal(err)
			}
			return cfg.GetRules()
		case "envoy.filters.network.http_connection_manager":
			hcm := &hcmv3.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
				t.Fatal(err)
			}
			if hf := hcm.GetHttpFilters()[0]; hf.GetName() == "envoy.filters.http.rbac" {
				cfg := &rbachttpv3.RBAC{}
				if err := hf.GetTypedConfig().UnmarshalTo(cfg); err != nil {
					t.Fatal(err)
				}
				return cfg.GetRules()
			}
			t.Fatalf("chain %q: first HTTP filter %q, want the RBAC", fc.GetName(), hcm.GetHttpFilters()[0].GetName())
		}
	}
	t.Fatalf("chain %q has no RBAC before its proxy", fc.GetName())
	return nil
}

// TestTerminatingGatewayListener: one listener with the TLS inspector;
// one chain per linked service matched by its mesh SNI, requiring a
// client certificate that chains to the Connect roots and presenting that
// service's own leaf; RBAC first; then a catch-all chain that lets
// nobody through. The clusters originate TLS from the entry's files.
func TestTerminatingGatewayListener(t *testing.T) {
	m := gatewayModel()
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	g := m.Groups[0]
	if out.Failed[g.Name] != nil {
		t.Fatal(out.Failed[g.Name])
	}
	r := out.Groups[g.Name]
	l := listenerNamed(t, r, ir.GatewayListenerName(g.Name))
	if fs := l.GetListenerFilters(); len(fs) != 1 || fs[0].GetName() != "envoy.filters.listener.tls_inspector" {
		t.Errorf("listener filters %v, want the TLS inspector", fs)
	}
	if sa := l.GetAddress().GetSocketAddress(); sa.GetAddress() != "0.0.0.0" || sa.GetPortValue() != 9443 {
		t.Errorf("bind %s:%d", sa.GetAddress(), sa.GetPortValue())
	}
	chains := l.GetFilterChains()
	if len(chains) != 3 {
		t.Fatalf("%d chains, want 2 and the catch-all", len(chains))
	}
	for i, c := range g.Gateway.Chains {
		fc := chains[i]
		if sn := fc.GetFilterChainMatch().GetServerNames(); !slices.Equal(sn, []string{c.SNI}) {
			t.Errorf("chain %d matches %v, want [%s]", i, sn, c.SNI)
		}
		d := &tlsv3.DownstreamTlsContext{}
		if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(d); err != nil {
			t.Fatal(err)
		}
		ctx := d.GetCommonTlsContext()
		if !d.GetRequireClientCertificate().GetValue() || ctx.GetValidationContextSdsSecretConfig().GetName() != ir.RootsSecretName {
			t.Errorf("chain %s: client certificates not required against the roots", c.Service)
		}
		if got := ctx.GetTlsCertificateSdsSecretConfigs(); len(got) != 1 || got[0].GetName() != ir.LeafSecretPrefix+c.Service {
			t.Errorf("chain %s presents %v, want its own leaf", c.Service, got)
		}
	}
	fallback := chains[2]
	if fallback.GetFilterChainMatch() != nil || fallback.GetTransportSocket() != nil {
		t.Errorf("catch-all chain %v", fallback)
	}
	spiffe := func(s string) string { return ir.SPIFFEID(gwTD, "dc1", s) }
	for _, src := range []string{"web", "ops", "other"} {
		if rbacAllows(t, chainRBAC(t, fallback), spiffe(src), intention.Request{Source: src}) {
			t.Errorf("catch-all chain lets %s through", src)
		}
	}
	var billing, db *clusterv3.Cluster
	for _, c := range out.Shared.Clusters {
		switch c.GetName() {
		case m.Clusters[0].Name:
			billing = c
		case m.Clusters[1].Name:
			db = c
		}
	}
	if db.GetTransportSocket() != nil {
		t.Error("db: TLS without a CA file in the entry (Consul originates none)")
	}
	u := &tlsv3.UpstreamTlsContext{}
	if err := billing.GetTransportSocket().GetTypedConfig().UnmarshalTo(u); err != nil {
		t.Fatal(err)
	}
	vc := u.GetCommonTlsContext().GetValidationContext()
	certs := u.GetCommonTlsContext().GetTlsCertificates()
	if u.GetSni() != "billing.example.com" || vc.GetTrustedCa().GetFilename() != "/etc/tgw/ca.pem" ||
		len(vc.GetMatchTypedSubjectAltNames()) != 1 || vc.GetMatchTypedSubjectAltNames()[0].GetMatcher().GetExact() != "billing.example.com" ||
		len(certs) != 1 || certs[0].GetCertificateChain().GetFilename() != "/etc/tgw/c.pem" || certs[0].GetPrivateKey().GetFilename() != "/etc/tgw/k.pem" {
		t.Errorf("billing upstream TLS %v", u)
	}
	if len(r.Secrets) != 0 {
		t.Errorf("secrets %v", r.Secrets)
	}
}

// TestTerminatingGatewayRBAC: each chain enforces its own service's
// intentions, decided by the evaluator of the sidecar RBAC tests: db lets
// web in and keeps ops (denied) and others (default deny) out; billing
// lets web GET and nothing else.
func TestTerminatingGatewayRBAC(t *testing.T) {
	m := gatewayModel()
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	g := m.Groups[0]
	l := listenerNamed(t, out.Groups[g.Name], ir.GatewayListenerName(g.Name))
	spiffe := func(s string) string { return ir.SPIFFEID(gwTD, "dc1", s) }
	for _, tc := range []struct {
		chain  int
		req    intention.Request
		allows bool
	}{
		{1, intention.Request{Source: "web"}, true},
		{1, intention.Request{Source: "ops"}, false},
		{1, intention.Request{Source: "other"}, false},
		{0, intention.Request{Source: "web", Method: "GET", Path: "/"}, true},
		{0, intention.Request{Source: "web", Method: "POST", Path: "/"}, false},
		{0, intention.Request{Source: "ops", Method: "GET", Path: "/"}, false},
	} {
		c := g.Gateway.Chains[tc.chain]
		got := rbacAllows(t, chainRBAC(t, l.GetFilterChains()[tc.chain]), spiffe(tc.req.Source), tc.req)
		if got != tc.allows {
			t.Errorf("%s %s %s: allows=%v, want %v", c.Service, tc.req.Source, tc.req.Method, got, tc.allows)
		}
		if ref := intention.Decide(c.Intentions, tc.req) == ir.IntentionAllow; ref != tc.allows {
			t.Errorf("%s %s %s: intention.Decide allows=%v, want %v", c.Service, tc.req.Source, tc.req.Method, ref, tc.allows)
		}
	}
	// billing's HTTP chain names its route configuration by its SNI, as
	// Consul does, and that route sends everything to billing's cluster.
	hcm := &hcmv3.HttpConnectionManager{}
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	rn := hcm.GetRds().GetRouteConfigName()
	if rn != g.Gateway.Chains[0].SNI {
		t.Errorf("route configuration %q, want the SNI", rn)
	}
	found := false
	for _, rc := range out.Groups[g.Name].Routes {
		if rc.GetName() == rn {
			found = strings.Contains(rc.String(), g.Gateway.Chains[0].Cluster)
		}
	}
	if !found {
		t.Errorf("no route configuration %q to %s", rn, g.Gateway.Chains[0].Cluster)
	}
}

// TestGatewayModelChecks: a terminating chain without a certificate,
// chains out of order, or TLS files without a CA or with a certificate
// but no key, are refused by the model.
func TestGatewayModelChecks(t *testing.T) {
	for name, f := range map[string]ir.TLSFiles{"no CA": {Cert: "c", Key: "k"}, "no key": {CA: "ca", Cert: "c"}} {
		m := gatewayModel()
		m.Clusters[0].TLS.Files = &f
		if err := m.Validate(); err == nil || !strings.Contains(err.Error(), "TLS files") {
			t.Errorf("%s: %v", name, err)
		}
	}
	m := gatewayModel()
	m.Groups[0].Gateway.Chains[1].CertificateSecret = ""
	if err := m.Validate(); err == nil || !strings.Contains(err.Error(), "no certificate") {
		t.Errorf("chain without a certificate: %v", err)
	}
	m = gatewayModel()
	c := m.Groups[0].Gateway.Chains
	c[0], c[1] = c[1], c[0]
	if err := m.Validate(); err == nil {
		t.Error("unsorted chains accepted")
	}
}

// TestMeshGatewayListener: a mesh gateway's chains match each service's
// SNI and only forward (no TLS termination, no RBAC: the caller's mutual
// TLS reaches the destination's sidecar, which checks the intentions);
// connections for any other name meet the deny-all catch-all.
func TestMeshGatewayListener(t *testing.T) {
	api := ir.MeshClusterName("api", "dc1", gwTD)
	group := ir.SidecarGroupName("vm-d", "mgw-1")
	m := &ir.Model{
		Mesh:     &ir.Mesh{TrustDomain: gwTD},
		Clusters: []*ir.Cluster{{Name: api + "/mgw", Service: "api", ConnectTimeout: time.Second, Endpoints: []ir.Endpoint{{Address: netip.MustParseAddr("10.0.0.1"), Port: 21001, Health: ir.Healthy, Weight: 1}}}},
		Groups: []ir.Group{{Name: group, Clusters: []string{api + "/mgw"}, Gateway: &ir.Gateway{Kind: ir.GatewayMesh, ProxyID: "mgw-1", Node: "vm-d", Service: "mgw", Datacenter: "dc1", Address: "10.0.0.4", Port: 8443,
			Chains: []ir.GatewayChain{{SNI: api, Service: "api", Cluster: api + "/mgw"}}}}},
	}
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	if out.Failed[group] != nil {
		t.Fatal(out.Failed[group])
	}
	l := listenerNamed(t, out.Groups[group], ir.GatewayListenerName(group))
	if fs := l.GetListenerFilters(); len(fs) != 1 || fs[0].GetName() != "envoy.filters.listener.tls_inspector" {
		t.Errorf("listener filters %v, want the TLS inspector", fs)
	}
	chains := l.GetFilterChains()
	if len(chains) != 2 {
		t.Fatalf("%d chains", len(chains))
	}
	c := chains[0]
	if !slices.Equal(c.GetFilterChainMatch().GetServerNames(), []string{api}) || c.GetTransportSocket() != nil ||
		len(c.GetFilters()) != 1 || c.GetFilters()[0].GetName() != "envoy.filters.network.tcp_proxy" ||
		!strings.Contains(c.GetFilters()[0].GetTypedConfig().String(), api+"/mgw") {
		t.Errorf("api chain %v: want SNI match, no TLS, tcp_proxy to %s/mgw", c, api)
	}
	for _, src := range []string{"web", "api"} {
		if rbacAllows(t, chainRBAC(t, chains[1]), ir.SPIFFEID(gwTD, "dc1", src), intention.Request{Source: src}) {
			t.Errorf("catch-all lets %s through", src)
		}
	}
	if len(out.Groups[group].Secrets) != 0 {
		t.Errorf("secrets %v", out.Groups[group].Secrets)
	}
}
