package xds_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/irtest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// The tests here pin properties that a golden file records but a careless
// -update could silently lose: they must hold for every model, so they are
// checked on hand-written models and on every golden case.

const faultFilter = "envoy.filters.http.fault"

func translate(t *testing.T, m *ir.Model) *xds.Output {
	t.Helper()
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatalf("Translate: %v", err)
	}
	return out
}

// goldenOutputs translates every golden case, so the properties below are
// checked on the same worlds the goldens record.
func goldenOutputs(t *testing.T) map[string]*xds.Output {
	t.Helper()
	outs := map[string]*xds.Output{}
	for name, m := range goldenModels(t) {
		out, err := xds.Translate(m)
		if err != nil {
			t.Fatalf("%s: Translate: %v", name, err)
		}
		outs[name] = out
	}
	return outs
}

// TestTranslatorMatchesTranslate: one Translator taken through every
// golden world in turn, twice (each step a different world), returns
// exactly what the pure Translate returns for each.
func TestTranslatorMatchesTranslate(t *testing.T) {
	models := goldenModels(t)
	names := slices.Sorted(maps.Keys(models))
	tr := xds.NewTranslator()
	for _, name := range append(names, names...) {
		got, err := tr.Translate(models[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := translate(t, models[name])
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Fatalf("%s: Translator differs from Translate (-want +got):\n%s", name, diff)
		}
	}
}

// TestTranslatorReusesUnchanged: after one endpoint changes, only that
// cluster's ClusterLoadAssignment is a new object; every other resource is
// the one translated before.
func TestTranslatorReusesUnchanged(t *testing.T) {
	model := func(port uint16) *ir.Model {
		b := ep("10.0.0.2", 0, "dc1")
		b.Port = uint32(port)
		return irtest.Reach(&ir.Model{
			Clusters: []*ir.Cluster{cluster("a", ep("10.0.0.1", 0, "dc1")), cluster("b", b), cluster("c", ep("10.0.0.3", 0, "dc1"))},
			Groups:   []ir.Group{{Name: "edge", Listeners: []ir.Listener{httpListener("edge.http", routeTo("/", ir.WeightedCluster{Name: "a", Weight: 1}))}}},
		})
	}
	tr := xds.NewTranslator()
	first, err := tr.Translate(model(8080))
	if err != nil {
		t.Fatal(err)
	}
	second, err := tr.Translate(model(9090))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if first.Shared.Clusters[i] != second.Shared.Clusters[i] {
			t.Errorf("cluster %d rebuilt", i)
		}
		if changed := first.Shared.Endpoints[i] != second.Shared.Endpoints[i]; changed != (i == 1) {
			t.Errorf("endpoints %d: rebuilt = %v, want %v", i, changed, i == 1)
		}
	}
	if first.Groups["edge"].Listeners[0] != second.Groups["edge"].Listeners[0] || first.Groups["edge"].Routes[0] != second.Groups["edge"].Routes[0] {
		t.Error("unchanged listener or route rebuilt")
	}
	if got := second.Shared.Endpoints[1].GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); got != 9090 {
		t.Errorf("changed endpoint port = %d, want 9090", got)
	}
}

func hcmOf(t *testing.T, l *listenerv3.Listener) *hcmv3.HttpConnectionManager {
	t.Helper()
	if api := l.GetApiListener().GetApiListener(); api != nil {
		// An API listener (proxyless gRPC clients): the HCM is the listener.
		hcm := &hcmv3.HttpConnectionManager{}
		if err := api.UnmarshalTo(hcm); err != nil {
			t.Fatalf("API listener %q: %v", l.GetName(), err)
		}
		return hcm
	}
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			if f.GetName() != wellknown.HTTPConnectionManager {
				continue
			}
			hcm := &hcmv3.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
				t.Fatalf("listener %q: %v", l.GetName(), err)
			}
			return hcm
		}
	}
	return nil
}

func tcpProxyOf(t *testing.T, l *listenerv3.Listener) *tcpproxyv3.TcpProxy {
	t.Helper()
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			if f.GetName() != wellknown.TCPProxy {
				continue
			}
			tp := &tcpproxyv3.TcpProxy{}
			if err := f.GetTypedConfig().UnmarshalTo(tp); err != nil {
				t.Fatalf("listener %q: %v", l.GetName(), err)
			}
			return tp
		}
	}
	return nil
}

func filterNames(hcm *hcmv3.HttpConnectionManager) []string {
	var names []string
	for _, f := range hcm.GetHttpFilters() {
		names = append(names, f.GetName())
	}
	return names
}

func usesFault(rc *routev3.RouteConfiguration) bool {
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if _, ok := r.GetTypedPerFilterConfig()[faultFilter]; ok {
				return true
			}
		}
	}
	return false
}

func routeConfig(r *xds.Resources, name string) *routev3.RouteConfiguration {
	for _, rc := range r.Routes {
		if rc.GetName() == name {
			return rc
		}
	}
	return nil
}

// Adding the first fault to a listener's routes changes its route
// configuration only: the fault filter is on every Envoy HTTP listener,
// inert until a route configures it, because a changed listener makes
// Envoy drain it. The router is always the last filter (Envoy ignores
// filters after it). API listeners (gRPC, which does not drain) carry the
// fault filter only when a route uses it.
func TestTranslateFaultChangesRoutesOnly(t *testing.T) {
	model := func(fault bool) *ir.Model {
		r := routeTo("/", ir.WeightedCluster{Name: "web", Weight: 1})
		l := httpListener("edge.http", r)
		if fault {
			l.VirtualHosts[0].Routes[0].Fault = &ir.Fault{Delay: time.Second, DelayPercent: 10}
			l.UsesFault = true
		}
		return irtest.Reach(&ir.Model{Clusters: []*ir.Cluster{cluster("web")}, Groups: []ir.Group{{Name: "edge", Listeners: []ir.Listener{l}}}})
	}
	before, after := translate(t, model(false)), translate(t, model(true))
	if diff := cmp.Diff(before.Groups["edge"].Listeners, after.Groups["edge"].Listeners, protocmp.Transform()); diff != "" {
		t.Errorf("adding a fault changed the listener (Envoy would drain it):\n%s", diff)
	}
	if proto.Equal(before.Groups["edge"].Routes[0], after.Groups["edge"].Routes[0]) {
		t.Error("adding a fault did not change the route configuration")
	}
	if got := filterNames(hcmOf(t, before.Groups["edge"].Listeners[0])); !slices.Equal(got, envoyFilterOrder) {
		t.Errorf("HTTP filters = %v, want the fixed chain %v", got, envoyFilterOrder)
	}

	for name, out := range goldenOutputs(t) {
		for group, r := range out.Groups {
			api := out.ProxylessGroups[group]
			for _, l := range r.Listeners {
				hcm := hcmOf(t, l)
				if hcm == nil {
					continue
				}
				names := filterNames(hcm)
				if len(names) == 0 || names[len(names)-1] != wellknown.Router {
					t.Errorf("%s: group %q listener %q: router is not the last filter: %v", name, group, l.GetName(), names)
				}
				rc := routeConfig(r, hcm.GetRds().GetRouteConfigName())
				if has := slices.Contains(names, faultFilter); !api && !has || api && has != usesFault(rc) {
					t.Errorf("%s: listener %q (API listener %v): fault filter present = %v, a route uses fault = %v", name, l.GetName(), api, has, usesFault(rc))
				}
			}
		}
	}
}

// Every HTTP listener takes its routes over RDS (via ADS) from the route
// configuration named like the listener, which its group serves; tcp
// listeners have none, and no route configuration is orphaned.
func TestTranslateListenerRDSNames(t *testing.T) {
	check := func(t *testing.T, name string, out *xds.Output) {
		groups := maps.Clone(out.Groups)
		groups["(proxyless)"] = out.Proxyless
		for group, r := range groups {
			served := map[string]bool{}
			for _, l := range r.Listeners {
				hcm := hcmOf(t, l)
				if hcm == nil {
					if tcpProxyOf(t, l) == nil {
						t.Errorf("%s: group %q listener %q has neither an HTTP connection manager nor a tcp_proxy", name, group, l.GetName())
					}
					continue
				}
				want := &hcmv3.Rds{
					ConfigSource: &corev3.ConfigSource{
						ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
						ResourceApiVersion:    corev3.ApiVersion_V3,
					},
					RouteConfigName: l.GetName(),
				}
				if diff := cmp.Diff(want, hcm.GetRds(), protocmp.Transform()); diff != "" {
					t.Errorf("%s: group %q listener %q RDS (-want +got):\n%s", name, group, l.GetName(), diff)
				}
				if routeConfig(r, l.GetName()) == nil {
					t.Errorf("%s: group %q listener %q: route configuration %q is not in the group's routes", name, group, l.GetName(), l.GetName())
				}
				served[l.GetName()] = true
			}
			for _, rc := range r.Routes {
				if !served[rc.GetName()] {
					t.Errorf("%s: group %q: route configuration %q belongs to no HTTP listener", name, group, rc.GetName())
				}
			}
		}
	}
	m := irtest.Reach(&ir.Model{
		Clusters: []*ir.Cluster{cluster("db"), cluster("web")},
		Groups: []ir.Group{
			{Name: "app-*", Listeners: []ir.Listener{
				{Name: "app-*.db", Address: "127.0.0.1", Port: 5432, Protocol: "tcp", TCP: []ir.WeightedCluster{{Name: "db", Weight: 1}}},
				httpListener("app-*.http", routeTo("/", ir.WeightedCluster{Name: "web", Weight: 1})),
			}},
			{Name: "edge", Listeners: []ir.Listener{httpListener("edge.http", routeTo("/", ir.WeightedCluster{Name: "web", Weight: 1}))}},
		},
	})
	out := translate(t, m)
	if got := len(out.Groups["app-*"].Routes); got != 1 {
		t.Errorf("group app-*: %d route configurations, want 1 (the tcp listener has none)", got)
	}
	check(t, "model", out)
	for name, out := range goldenOutputs(t) {
		check(t, name, out)
	}
}

// routeClusters lists every cluster a group's routes and tcp listeners can
// send traffic (or mirrored traffic) to.
func routeClusters(t *testing.T, r *xds.Resources) []string {
	var names []string
	for _, rc := range r.Routes {
		for _, vh := range rc.GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				a := rt.GetRoute()
				if a == nil {
					continue
				}
				if c := a.GetCluster(); c != "" {
					names = append(names, c)
				}
				for _, wc := range a.GetWeightedClusters().GetClusters() {
					names = append(names, wc.GetName())
				}
				for _, mp := range a.GetRequestMirrorPolicies() {
					names = append(names, mp.GetCluster())
				}
			}
		}
	}
	for _, l := range r.Listeners {
		tp := tcpProxyOf(t, l)
		if c := tp.GetCluster(); c != "" {
			names = append(names, c)
		}
		for _, wc := range tp.GetWeightedClusters().GetClusters() {
			names = append(names, wc.GetName())
		}
	}
	return names
}

// Every cluster a route or tcp listener names is in CDS, and every CDS
// cluster has its EDS resource of the same name: Envoy would answer 503
// (or wait forever for EDS) otherwise.
func TestTranslateRouteClustersExist(t *testing.T) {
	for name, out := range goldenOutputs(t) {
		cds := map[string]bool{}
		for _, c := range out.Shared.Clusters {
			cds[c.GetName()] = true
		}
		var eds []string
		for _, e := range out.Shared.Endpoints {
			eds = append(eds, e.GetClusterName())
		}
		var cdsNames []string
		for _, c := range out.Shared.Clusters {
			cdsNames = append(cdsNames, c.GetName())
			if c.GetEdsClusterConfig().GetServiceName() != "" {
				t.Errorf("%s: cluster %q names EDS resource %q; it must default to the cluster name", name, c.GetName(), c.GetEdsClusterConfig().GetServiceName())
			}
		}
		if diff := cmp.Diff(cdsNames, eds); diff != "" {
			t.Errorf("%s: EDS names differ from CDS names (-cds +eds):\n%s", name, diff)
		}
		for group, r := range out.Groups {
			refs := routeClusters(t, r)
			if len(refs) == 0 && len(r.Listeners) > 0 {
				t.Errorf("%s: group %q routes to no cluster at all", name, group)
			}
			// A group's routes name only clusters its proxies get.
			reach := map[string]bool{}
			for _, c := range out.Reach[group].Clusters {
				reach[c.GetName()] = true
			}
			for _, c := range refs {
				if !reach[c] {
					t.Errorf("%s: group %q routes to cluster %q, which its proxies do not get", name, group, c)
				}
				if !cds[c] {
					t.Errorf("%s: group %q routes to cluster %q, which is not in CDS", name, group, c)
				}
			}
		}
	}
}

// Weighted splits keep their declared clusters, order and weights, on HTTP
// routes and on tcp listeners; a single target is a plain cluster.
func TestTranslateWeightedClusters(t *testing.T) {
	split := []ir.WeightedCluster{{Name: "api.v1", Weight: 70}, {Name: "api.v2", Weight: 25}, {Name: "api-next", Weight: 5}}
	m := irtest.Reach(&ir.Model{
		Clusters: []*ir.Cluster{cluster("api-next"), cluster("api.v1"), cluster("api.v2")},
		Groups: []ir.Group{{Name: "edge", Listeners: []ir.Listener{
			httpListener("edge.http", routeTo("/api/", split...), routeTo("/", ir.WeightedCluster{Name: "api.v1", Weight: 10})),
			{Name: "edge.tcp", Address: "0.0.0.0", Port: 9000, Protocol: "tcp", TCP: split},
		}}},
	})
	out := translate(t, m)
	r := out.Groups["edge"]

	wantHTTP := &routev3.WeightedCluster{Clusters: []*routev3.WeightedCluster_ClusterWeight{
		{Name: "api.v1", Weight: wrapperspb.UInt32(70)},
		{Name: "api.v2", Weight: wrapperspb.UInt32(25)},
		{Name: "api-next", Weight: wrapperspb.UInt32(5)},
	}}
	routes := routeConfig(r, "edge.http").GetVirtualHosts()[0].GetRoutes()
	if diff := cmp.Diff(wantHTTP, routes[0].GetRoute().GetWeightedClusters(), protocmp.Transform()); diff != "" {
		t.Errorf("HTTP weighted clusters (-want +got):\n%s", diff)
	}
	if got := routes[1].GetRoute().GetCluster(); got != "api.v1" {
		t.Errorf("single target: cluster = %q, want plain cluster api.v1 (route action %v)", got, routes[1].GetRoute())
	}

	var tcp *listenerv3.Listener
	for _, l := range r.Listeners {
		if l.GetName() == "edge.tcp" {
			tcp = l
		}
	}
	wantTCP := &tcpproxyv3.TcpProxy_WeightedCluster{Clusters: []*tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight{
		{Name: "api.v1", Weight: 70}, {Name: "api.v2", Weight: 25}, {Name: "api-next", Weight: 5},
	}}
	if diff := cmp.Diff(wantTCP, tcpProxyOf(t, tcp).GetWeightedClusters(), protocmp.Transform()); diff != "" {
		t.Errorf("tcp weighted clusters (-want +got):\n%s", diff)
	}

	// In the goldens: every weighted split has at least two clusters, each
	// with a positive weight (Envoy rejects a zero total).
	for name, out := range goldenOutputs(t) {
		for _, r := range out.Groups {
			for _, rc := range r.Routes {
				for _, vh := range rc.GetVirtualHosts() {
					for _, rt := range vh.GetRoutes() {
						wc := rt.GetRoute().GetWeightedClusters()
						if wc == nil {
							continue
						}
						if len(wc.GetClusters()) < 2 {
							t.Errorf("%s: route %q: weighted clusters with %d cluster(s); one target should be a plain cluster", name, rt.GetName(), len(wc.GetClusters()))
						}
						for _, c := range wc.GetClusters() {
							if c.GetWeight().GetValue() == 0 {
								t.Errorf("%s: route %q: cluster %q has weight 0", name, rt.GetName(), c.GetName())
							}
						}
					}
				}
			}
		}
	}
}

// Failover tiers become dense priorities (Envoy requires no gaps), and a
// multi-priority assignment fails over only when a tier has no healthy
// host, as the policy documents.
func TestTranslateFailoverPriorities(t *testing.T) {
	m := irtest.Reach(&ir.Model{Clusters: []*ir.Cluster{
		// No local (priority 0) endpoint: the tiers are 1 and 2.
		cluster("reports", ep("10.2.0.1", 1, "dc2"), ep("10.3.0.1", 2, "dc3")),
		cluster("web", ep("10.0.0.1", 0, "dc1")),
	}})
	out := translate(t, m)
	lbe := func(addr string) *endpointv3.LbEndpoint {
		return &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{
				Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080},
				}},
			}}},
			HealthStatus:        corev3.HealthStatus_HEALTHY,
			LoadBalancingWeight: wrapperspb.UInt32(1),
		}
	}
	want := []*endpointv3.ClusterLoadAssignment{
		{
			ClusterName: "reports",
			Endpoints: []*endpointv3.LocalityLbEndpoints{
				{Locality: &corev3.Locality{Region: "dc2"}, Priority: 0, LoadBalancingWeight: wrapperspb.UInt32(1), LbEndpoints: []*endpointv3.LbEndpoint{lbe("10.2.0.1")}},
				{Locality: &corev3.Locality{Region: "dc3"}, Priority: 1, LoadBalancingWeight: wrapperspb.UInt32(1), LbEndpoints: []*endpointv3.LbEndpoint{lbe("10.3.0.1")}},
			},
			Policy: &endpointv3.ClusterLoadAssignment_Policy{OverprovisioningFactor: wrapperspb.UInt32(100000)},
		},
		{
			ClusterName: "web",
			Endpoints: []*endpointv3.LocalityLbEndpoints{
				{Locality: &corev3.Locality{Region: "dc1"}, LoadBalancingWeight: wrapperspb.UInt32(1), LbEndpoints: []*endpointv3.LbEndpoint{lbe("10.0.0.1")}},
			},
		},
	}
	if diff := cmp.Diff(want, out.Shared.Endpoints, protocmp.Transform()); diff != "" {
		t.Errorf("load assignments (-want +got):\n%s", diff)
	}
}

// Settings whose Envoy defaults would quietly break the upstream: HTTP/2
// health checks for an HTTP/2 cluster, ALPN h2 over TLS, and the SNI name
// checked against the certificate.
func TestTranslateUpstreamProtocol(t *testing.T) {
	c := cluster("grpc")
	c.HTTP2 = true
	c.HealthCheck = &ir.HealthCheck{Path: "/healthz", Interval: time.Second, Timeout: time.Second, HealthyThreshold: 1, UnhealthyThreshold: 1}
	c.TLS = &ir.UpstreamTLS{SNI: "grpc.internal", CASecret: "grpc/ca"}
	out := translate(t, irtest.Reach(&ir.Model{Clusters: []*ir.Cluster{c}, Secrets: []ir.Secret{{Name: "grpc/ca", TrustedCA: []byte("CA PEM")}}}))
	got := out.Shared.Clusters[0]

	if diff := cmp.Diff(&corev3.HealthCheck_HttpHealthCheck{Path: "/healthz", CodecClientType: typev3.CodecClientType_HTTP2},
		got.GetHealthChecks()[0].GetHttpHealthCheck(), protocmp.Transform()); diff != "" {
		t.Errorf("health check (-want +got):\n%s", diff)
	}
	tlsCtx := &tlsv3.UpstreamTlsContext{}
	if err := got.GetTransportSocket().GetTypedConfig().UnmarshalTo(tlsCtx); err != nil {
		t.Fatal(err)
	}
	want := &tlsv3.UpstreamTlsContext{
		Sni: "grpc.internal",
		CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols: []string{"h2"},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext: &tlsv3.CertificateValidationContext{
					MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
						SanType: tlsv3.SubjectAltNameMatcher_DNS,
						Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "grpc.internal"}},
					}},
				},
				// The CA itself comes over SDS.
				ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "grpc/ca", SdsConfig: &corev3.ConfigSource{
					ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
					ResourceApiVersion:    corev3.ApiVersion_V3,
				}},
			}},
		},
	}
	if diff := cmp.Diff(want, tlsCtx, protocmp.Transform()); diff != "" {
		t.Errorf("upstream TLS (-want +got):\n%s", diff)
	}
	if got.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN {
		t.Errorf("lb policy = %v, want the zero value's round robin", got.GetLbPolicy())
	}
}

// Envoy ignores case_sensitive for safe_regex, so a case-insensitive regex
// route carries RE2's (?i) flag instead.
func TestTranslateCaseInsensitiveRegex(t *testing.T) {
	r := ir.Route{Source: "test.hcl:1", Match: ir.RouteMatch{PathRegex: "^/users/[0-9]+$"}, Clusters: []ir.WeightedCluster{{Name: "web", Weight: 1}}}
	out := translate(t, irtest.Reach(&ir.Model{
		Clusters: []*ir.Cluster{cluster("web")},
		Groups:   []ir.Group{{Name: "edge", Listeners: []ir.Listener{httpListener("edge.http", r)}}},
	}))
	want := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "(?i)^/users/[0-9]+$"}}}
	got := out.Groups["edge"].Routes[0].GetVirtualHosts()[0].GetRoutes()[0].GetMatch()
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("match (-want +got):\n%s", diff)
	}
}

// A query parameter match cannot be inverted in Envoy; dropping the invert
// would route exactly the requests the policy excludes.
func TestTranslateInvertedQueryIsAnError(t *testing.T) {
	r := routeTo("/", ir.WeightedCluster{Name: "web", Weight: 1})
	r.Match.Query = []ir.ValueMatch{{Name: "debug", Present: true, Invert: true}}
	out, err := xds.Translate(irtest.Reach(&ir.Model{
		Clusters: []*ir.Cluster{cluster("web")},
		Groups:   []ir.Group{{Name: "edge", Listeners: []ir.Listener{httpListener("edge.http", r)}}, {Name: "other"}},
	}))
	if err != nil || !errors.Is(out.Failed["edge"], xds.ErrUnsupported) {
		t.Fatalf("Translate error = %v, group edge failed with %v, want ErrUnsupported", err, out.Failed["edge"])
	}
	if _, ok := out.Groups["edge"]; ok {
		t.Error("a failed group is in Groups")
	}
	if out.Groups["other"] == nil || len(out.Failed) != 1 {
		t.Errorf("the other group is not served: groups %v, failed %v", out.Groups, out.Failed)
	}
}

// TestTranslatorReusesSecrets: a rotated listener certificate is a new
// secret; the unchanged shared secrets are last time's objects.
func TestTranslatorReusesSecrets(t *testing.T) {
	tr := xds.NewTranslator()
	first, err := tr.Translate(tlsModel("1"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := tr.Translate(tlsModel("2"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range first.Shared.Secrets {
		if first.Shared.Secrets[i] != second.Shared.Secrets[i] {
			t.Errorf("shared secret %s rebuilt although unchanged", first.Shared.Secrets[i].GetName())
		}
	}
	for i, s := range second.Groups["edge"].Secrets {
		if s == first.Groups["edge"].Secrets[i] || !strings.Contains(chainOf(s), "-2") {
			t.Errorf("rotated secret %s: reused or stale (%q)", s.GetName(), chainOf(s))
		}
	}
	if diff := cmp.Diff(translate(t, tlsModel("2")), second, protocmp.Transform()); diff != "" {
		t.Errorf("Translator differs from Translate (-want +got):\n%s", diff)
	}
}
