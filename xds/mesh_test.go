package xds_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

func listenerNamed(t *testing.T, r *xds.Resources, name string) *listenerv3.Listener {
	t.Helper()
	for _, l := range r.Listeners {
		if l.GetName() == name {
			return l
		}
	}
	t.Fatalf("no listener %q", name)
	return nil
}

func downstreamContext(t *testing.T, l *listenerv3.Listener) *tlsv3.DownstreamTlsContext {
	t.Helper()
	d := &tlsv3.DownstreamTlsContext{}
	if err := l.GetFilterChains()[0].GetTransportSocket().GetTypedConfig().UnmarshalTo(d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSidecarPublicListener: the public listener admits only callers
// with a certificate chaining to the roots, and runs the RBAC before
// anything else, with the ALPN Consul offers.
func TestSidecarPublicListener(t *testing.T) {
	for name, m := range map[string]*ir.Model{"tcp": meshSidecarTCP(t), "http": meshSidecarHTTPL7(t)} {
		t.Run(name, func(t *testing.T) {
			out, err := xds.Translate(m)
			if err != nil {
				t.Fatal(err)
			}
			g := m.Groups[0]
			if out.Failed[g.Name] != nil {
				t.Fatal(out.Failed[g.Name])
			}
			l := listenerNamed(t, out.Groups[g.Name], ir.PublicListenerName(g.Name))
			d := downstreamContext(t, l)
			if !d.GetRequireClientCertificate().GetValue() {
				t.Error("public listener does not require a client certificate")
			}
			ctx := d.GetCommonTlsContext()
			if got := ctx.GetValidationContextSdsSecretConfig().GetName(); got != ir.RootsSecretName {
				t.Errorf("client certificates verified against %q, want the roots", got)
			}
			if got := ctx.GetTlsCertificateSdsSecretConfigs()[0].GetName(); got != ir.LeafSecretPrefix+g.Sidecar.Service {
				t.Errorf("serves certificate %q", got)
			}
			first := l.GetFilterChains()[0].GetFilters()[0]
			switch name {
			case "tcp":
				if first.GetName() != "envoy.filters.network.rbac" || len(ctx.GetAlpnProtocols()) != 0 {
					t.Errorf("tcp: first filter %q, ALPN %v", first.GetName(), ctx.GetAlpnProtocols())
				}
			case "http":
				hcm := &hcmv3.HttpConnectionManager{}
				if err := first.GetTypedConfig().UnmarshalTo(hcm); err != nil {
					t.Fatal(err)
				}
				if hcm.GetHttpFilters()[0].GetName() != "envoy.filters.http.rbac" {
					t.Errorf("first HTTP filter %q, want the RBAC", hcm.GetHttpFilters()[0].GetName())
				}
				rbac := &rbachttpv3.RBAC{}
				if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(rbac); err != nil {
					t.Fatal(err)
				}
				want, err := xds.HTTPRBAC(g.Sidecar.Intentions)
				if err != nil || !proto.Equal(rbac, want) {
					t.Errorf("the listener's RBAC is not HTTPRBAC of the sidecar's intentions (%v)", err)
				}
				if got := ctx.GetAlpnProtocols(); len(got) != 1 || got[0] != "http/1.1" {
					t.Errorf("ALPN %v, want Consul's for http", got)
				}
			}
		})
	}
}

// TestSidecarIntentionChange: a changed intention rebuilds the public
// listener only; the upstream listeners and routes are the same objects,
// so serving sends no update for them (no drain of their connections).
func TestSidecarIntentionChange(t *testing.T) {
	tr := xds.NewTranslator()
	m := meshUpstreams(t)
	before, err := tr.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	m2 := meshUpstreams(t)
	m2.Groups[0].Sidecar.Intentions.Rules = append([]ir.IntentionRule{{Source: "batch", Action: ir.IntentionDeny, Precedence: 9}}, m2.Groups[0].Sidecar.Intentions.Rules...)
	after, err := tr.Translate(m2)
	if err != nil {
		t.Fatal(err)
	}
	g := m.Groups[0].Name
	b, a := before.Groups[g], after.Groups[g]
	if a == nil || len(a.Listeners) != len(b.Listeners) {
		t.Fatalf("group %q: %v", g, after.Failed[g])
	}
	for i := range b.Listeners {
		same := a.Listeners[i] == b.Listeners[i]
		public := b.Listeners[i].GetName() == ir.PublicListenerName(g)
		if public == same {
			t.Errorf("listener %q: reused=%v after an intention change", b.Listeners[i].GetName(), same)
		}
	}
	for i := range b.Routes {
		if a.Routes[i] != b.Routes[i] {
			t.Errorf("route configuration %q rebuilt", b.Routes[i].GetName())
		}
	}
}

// TestSidecarL7OnTCP: L7 permissions on a TCP destination fail the
// sidecar's group (it keeps what it had), not the others.
func TestSidecarL7OnTCP(t *testing.T) {
	m := meshPrecedence(t)
	m.Groups[0].Sidecar.Intentions.Rules = []ir.IntentionRule{{Source: "web", Permissions: []ir.IntentionPermission{{Action: ir.IntentionAllow, PathPrefix: "/"}}}}
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Failed[m.Groups[0].Name]; !errors.Is(err, xds.ErrIntention) || !strings.Contains(err.Error(), "tcp") {
		t.Errorf("group with L7 on tcp: %v", err)
	}
	if len(out.Failed) != 1 {
		t.Errorf("failed groups %v, want only the one", out.Failed)
	}
}

// TestMeshSecretsStrictWhenCentral: in central mode the bridge must serve
// a sidecar its leaf and the roots; without them its group fails (and
// keeps what it had) while the others update. In agent mode the same
// references are the agent's to serve.
func TestMeshSecretsStrictWhenCentral(t *testing.T) {
	for _, drop := range []string{ir.LeafSecretPrefix + "web", ir.RootsSecretName} {
		m := meshCentral(t)
		other := meshSidecarTCP(t)
		// Another sidecar, served its secrets: it must still update.
		web := m.Groups[0].Secrets
		other.Groups[0].Secrets = []ir.Secret{{Name: ir.LeafSecretPrefix + "db", CertificateChain: web[0].CertificateChain, PrivateKey: web[0].PrivateKey}, web[1]}
		m.Clusters = append(m.Clusters, other.Clusters...)
		m.Groups = append(m.Groups, other.Groups...)
		sortModel(m)
		g := ir.SidecarGroupName("node-5", "web-sidecar-proxy")
		for i := range m.Groups {
			if m.Groups[i].Name == g {
				m.Groups[i].Secrets = slices.DeleteFunc(m.Groups[i].Secrets, func(s ir.Secret) bool { return s.Name == drop })
			}
		}
		out, err := xds.Translate(m)
		if err != nil {
			t.Fatalf("without %q: %v", drop, err)
		}
		if err := out.Failed[g]; !errors.Is(err, xds.ErrInconsistent) || !strings.Contains(err.Error(), drop) {
			t.Errorf("central mesh without %q: group error %v", drop, err)
		}
		if len(out.Failed) != 1 || out.MeshSecretsExternal {
			t.Errorf("without %q: failed %v, external %v", drop, out.Failed, out.MeshSecretsExternal)
		}
	}
	// A group that reaches a mesh cluster without being served the
	// caller's leaf would warm that cluster forever.
	m := meshCentral(t)
	api := ir.MeshClusterName("api", meshDC, meshTD)
	m.Groups = append(m.Groups, ir.Group{Name: "edge", Clusters: []string{api}})
	sortModel(m)
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Failed["edge"]; !errors.Is(err, xds.ErrInconsistent) || !strings.Contains(err.Error(), "mesh secret") || len(out.Failed) != 1 {
		t.Errorf("group reaching a mesh cluster without its secrets: %v (failed: %v)", err, out.Failed)
	}
	m = meshCentral(t)
	m.Groups[0].Secrets = nil
	m.Mesh.Central = false
	out, err = xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	g := out.Groups[m.Groups[0].Name]
	if g == nil || !out.MeshSecretsExternal {
		t.Fatalf("agent mode: %v", out.Failed)
	}
	if err := xds.ConsistentExcept(out.Shared, g, out.ExternalSecrets()); err != nil {
		t.Errorf("agent mode: %v", err)
	}
	if err := xds.Consistent(out.Shared, g); err == nil {
		t.Error("strict Consistent accepts listeners naming secrets nobody serves")
	}
	// A leaf is never a shared secret: every group reaching a cluster
	// naming it would get the key.
	m = meshCentral(t)
	m.Secrets, m.Groups[0].Secrets = m.Groups[0].Secrets[:1], m.Groups[0].Secrets[1:]
	if err := m.Validate(); err == nil || !strings.Contains(err.Error(), "is a Connect leaf") {
		t.Errorf("leaf as shared secret: %v", err)
	}
}

// TestMeshClusterChecksURISAN: a mesh cluster accepts only the
// upstream's SPIFFE id, not the DNS name of its SNI.
func TestMeshClusterChecksURISAN(t *testing.T) {
	m := meshUpstreams(t)
	// One cluster fails over to dc2: its sidecars there present dc2's id.
	failover := -1
	for i := range m.Clusters {
		if tls := m.Clusters[i].TLS; tls != nil && len(tls.MatchURISANs) == 1 && failover < 0 {
			failover = i
			tls.MatchURISANs = append(tls.MatchURISANs, strings.Replace(tls.MatchURISANs[0], "/dc/"+meshDC+"/", "/dc/dc2/", 1))
		}
	}
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range out.Shared.Clusters {
		ic := m.Cluster(c.GetName())
		if ic.TLS == nil {
			continue
		}
		u := &tlsv3.UpstreamTlsContext{}
		if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(u); err != nil {
			t.Fatal(err)
		}
		sans := u.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext().GetMatchTypedSubjectAltNames()
		var got []string
		for _, san := range sans {
			if san.GetSanType() != tlsv3.SubjectAltNameMatcher_URI {
				t.Errorf("cluster %q checks a non-URI SAN %v", c.GetName(), san)
			}
			got = append(got, san.GetMatcher().GetExact())
		}
		if !slices.Equal(got, ic.TLS.MatchURISANs) {
			t.Errorf("cluster %q checks %v, want URIs %q only", c.GetName(), got, ic.TLS.MatchURISANs)
		}
		if u.GetSni() != c.GetName() {
			t.Errorf("cluster %q sends SNI %q", c.GetName(), u.GetSni())
		}
	}
	m.Clusters[1].TLS.CASecret = ""
	if err := m.Validate(); err == nil || !strings.Contains(err.Error(), "trusts no CA") {
		t.Errorf("URI SAN without a CA: %v", err)
	}
}

// TestSidecarValidation: what the translator needs of a registration.
func TestSidecarValidation(t *testing.T) {
	for name, mutate := range map[string]func(s *ir.Sidecar){
		"no service":        func(s *ir.Sidecar) { s.Service = "" },
		"no port":           func(s *ir.Sidecar) { s.Port = 0 },
		"no local cluster":  func(s *ir.Sidecar) { s.LocalCluster = "" },
		"unknown protocol":  func(s *ir.Sidecar) { s.Protocol = "redis" },
		"upstream port":     func(s *ir.Sidecar) { s.Upstreams[0].BindPort = 0 },
		"upstream cluster":  func(s *ir.Sidecar) { s.Upstreams[0].Cluster = "" },
		"routes on tcp":     func(s *ir.Sidecar) { s.Upstreams[0].Routes = s.Upstreams[1].Routes },
		"same bind twice":   func(s *ir.Sidecar) { s.Upstreams[2].BindPort = s.Upstreams[0].BindPort },
		"same upstream":     func(s *ir.Sidecar) { s.Upstreams[2].Service = "db" },
		"unreached cluster": func(s *ir.Sidecar) { s.Upstreams[0].Cluster = "local_app:other" },
	} {
		t.Run(name, func(t *testing.T) {
			m := meshUpstreams(t)
			if name == "unreached cluster" {
				m.Clusters = append(m.Clusters, localCluster("local_app:other", 1, false))
				sortModel(m)
			}
			mutate(m.Groups[0].Sidecar)
			if err := m.Validate(); err == nil {
				t.Error("invalid sidecar accepted")
			}
		})
	}
}

// TestLeafRotationTouchesOnlySecrets: a renewed leaf (central mode)
// changes the group's SDS secret and nothing else: listeners, routes and
// clusters are the same resources, so Envoy swaps the certificate
// without draining a listener or re-warming a cluster.
func TestLeafRotationTouchesOnlySecrets(t *testing.T) {
	tr := xds.NewTranslator()
	m := meshCentral(t)
	before, err := tr.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	m2 := meshCentral(t)
	g := m2.Groups[0].Name
	leaf := ir.LeafSecretPrefix + "web"
	for i := range m2.Groups[0].Secrets {
		if s := &m2.Groups[0].Secrets[i]; s.Name == leaf {
			s.CertificateChain = append(slices.Clone(s.CertificateChain), '\n') // a new certificate
		}
	}
	after, err := tr.Translate(m2)
	if err != nil {
		t.Fatal(err)
	}
	b, a := before.Groups[g], after.Groups[g]
	if a == nil || b == nil || len(a.Listeners) != len(b.Listeners) || len(a.Listeners) == 0 {
		t.Fatalf("group %q: before %v, after %v (%v)", g, b, a, after.Failed[g])
	}
	for i := range b.Listeners {
		if !proto.Equal(a.Listeners[i], b.Listeners[i]) {
			t.Errorf("listener %q changed with the leaf", b.Listeners[i].GetName())
		}
	}
	for i := range b.Routes {
		if !proto.Equal(a.Routes[i], b.Routes[i]) {
			t.Errorf("route configuration %q changed with the leaf", b.Routes[i].GetName())
		}
	}
	for i := range before.Shared.Clusters {
		if !proto.Equal(after.Shared.Clusters[i], before.Shared.Clusters[i]) {
			t.Errorf("cluster %q changed with the leaf", before.Shared.Clusters[i].GetName())
		}
	}
	changed := false
	for i := range b.Secrets {
		if b.Secrets[i].GetName() == leaf {
			changed = !proto.Equal(a.Secrets[i], b.Secrets[i])
		}
	}
	if !changed {
		t.Error("the leaf secret did not change")
	}
}

// TestUnmatchedNodesGetNoSidecarClusters: with unmatched_nodes = "all" a
// node in no group gets every service cluster but no mesh or local-app
// cluster of a sidecar (it holds no leaf; they would only warm).
func TestUnmatchedNodesGetNoSidecarClusters(t *testing.T) {
	m := meshUpstreams(t)
	m.UnmatchedAll = true
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	// Expected from the model's own parts, not from the rule under test:
	// each sidecar's local application and every cluster presenting a
	// leaf.
	sidecarOnly := map[string]bool{}
	for _, g := range m.Groups {
		if g.Sidecar != nil {
			sidecarOnly[g.Sidecar.LocalCluster] = true
		}
	}
	var want []string
	for _, c := range m.Clusters {
		if c.TLS != nil && c.TLS.CertificateSecret != "" {
			sidecarOnly[c.Name] = true
		}
		if !sidecarOnly[c.Name] {
			want = append(want, c.Name)
		}
	}
	if len(sidecarOnly) < 2 {
		t.Fatalf("the model has %d sidecar clusters; want a local app and a mesh cluster to leave out", len(sidecarOnly))
	}
	var got []string
	for _, c := range out.Unmatched.Clusters {
		got = append(got, c.GetName())
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("unmatched nodes get %v, want %v", got, want)
	}
}
