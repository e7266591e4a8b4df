package xds_test

import (
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/irtest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

func apiListener(name string, routes ...ir.Route) ir.Listener {
	l := ir.Listener{Name: name, VirtualHosts: []ir.VirtualHost{{Name: name, Domains: []string{"*"}, Routes: routes}}}
	for _, r := range routes {
		if r.Fault != nil {
			l.UsesFault = true
		}
	}
	return l
}

func proxylessModel() *ir.Model {
	canary := routeTo("/", ir.WeightedCluster{Name: "echo.v2", Weight: 1})
	canary.Match.Headers = []ir.ValueMatch{{Name: "x-canary", Exact: "1"}}
	canary.Timeout = 2 * time.Second
	canary.Retry = &ir.Retry{Attempts: 2, On: []string{"unavailable"}}
	rest := routeTo("/", ir.WeightedCluster{Name: "echo", Weight: 80}, ir.WeightedCluster{Name: "echo.v2", Weight: 20})
	rest.Timeout = ir.NoTimeout
	rest.Fault = &ir.Fault{AbortStatus: 503, AbortPercent: 1}
	edge := routeTo("/", ir.WeightedCluster{Name: "echo", Weight: 1})
	edge.Timeout = 2 * time.Second
	return irtest.Reach(&ir.Model{
		Clusters: []*ir.Cluster{cluster("echo"), cluster("echo.v2")},
		Groups: []ir.Group{
			{Name: "edge", Listeners: []ir.Listener{httpListener("edge.http", edge)}},
			{Name: "grpc-*", Proxyless: true},
		},
		Proxyless: []ir.Listener{apiListener("echo", canary, rest)},
	})
}

// A proxyless client's LDS resource is an API listener with RDS over ADS
// and the router last; its routes carry the deadline where gRPC reads it
// (max_stream_duration), while Envoy routes keep timeout.
func TestTranslateProxyless(t *testing.T) {
	out := translate(t, proxylessModel())
	if out.Groups["grpc-*"] != out.Proxyless {
		t.Fatal("a proxyless group does not serve the proxyless resources")
	}
	if len(out.Proxyless.Listeners) != 1 || len(out.Proxyless.Routes) != 1 {
		t.Fatalf("proxyless: %d listeners, %d routes; want 1 and 1", len(out.Proxyless.Listeners), len(out.Proxyless.Routes))
	}
	l := out.Proxyless.Listeners[0]
	if l.GetName() != "echo" || l.GetAddress() != nil || len(l.GetFilterChains()) != 0 || l.GetApiListener() == nil {
		t.Fatalf("API listener = %v", l)
	}
	hcm := hcmOf(t, l)
	if got := filterNames(hcm); !cmp.Equal(got, []string{faultFilter, "envoy.filters.http.router"}) {
		t.Errorf("http filters = %v, want fault then router", got)
	}
	if hcm.GetRds().GetRouteConfigName() != "echo" || hcm.GetRds().GetConfigSource().GetAds() == nil {
		t.Errorf("RDS = %v, want echo over ADS", hcm.GetRds())
	}
	if hcm.GetXffNumTrustedHops() != 0 || hcm.GetUseRemoteAddress() != nil || len(hcm.GetOriginalIpDetectionExtensions()) != 0 {
		t.Errorf("API listener carries Envoy edge settings gRPC rejects or ignores: %v", hcm)
	}
	for _, r := range out.Groups["edge"].Listeners {
		if r.GetApiListener() != nil {
			t.Errorf("Envoy group got API listener %q", r.GetName())
		}
	}

	rc := out.Proxyless.Routes[0]
	if rc.GetName() != "echo" || len(rc.GetVirtualHosts()) != 1 || !cmp.Equal(rc.GetVirtualHosts()[0].GetDomains(), []string{"*"}) {
		t.Fatalf("route configuration = %v", rc)
	}
	routes := rc.GetVirtualHosts()[0].GetRoutes()
	msd := func(r *routev3.Route) *time.Duration {
		d := r.GetRoute().GetMaxStreamDuration().GetMaxStreamDuration()
		if d == nil {
			return nil
		}
		v := d.AsDuration()
		return &v
	}
	if d := msd(routes[0]); d == nil || *d != 2*time.Second || routes[0].GetRoute().GetTimeout() != nil {
		t.Errorf("canary route: max_stream_duration %v, timeout %v; want 2s and none", d, routes[0].GetRoute().GetTimeout())
	}
	if d := msd(routes[1]); d == nil || *d != 0 {
		t.Errorf("no-timeout route: max_stream_duration %v, want 0s (no deadline)", d)
	}
	if rp := routes[0].GetRoute().GetRetryPolicy(); rp.GetRetryOn() != "unavailable" || rp.GetNumRetries().GetValue() != 2 {
		t.Errorf("retry policy = %v", rp)
	}
	if !usesFault(rc) {
		t.Error("fault route lost its per-route fault config")
	}
	edge := routeConfig(out.Groups["edge"], "edge.http").GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
	if edge.GetTimeout().AsDuration() != 2*time.Second || edge.GetMaxStreamDuration() != nil {
		t.Errorf("Envoy route: timeout %v, max_stream_duration %v; want 2s and none", edge.GetTimeout(), edge.GetMaxStreamDuration())
	}
}

// go-control-plane's Snapshot.Consistent does not look into API
// listeners, so it calls every proxyless route configuration unreferenced;
// xds.Consistent does, with the same rules.
func TestConsistentSeesAPIListeners(t *testing.T) {
	out := translate(t, proxylessModel())
	if err := xds.Consistent(out.Shared, out.Proxyless); err != nil {
		t.Errorf("proxyless resources: %v", err)
	}
	snap := &cachev3.Snapshot{}
	for typ, items := range out.Shared.ByType() {
		snap.Resources[cachev3.GetResponseType(typ)] = cachev3.NewResources("v", items)
	}
	for _, typ := range []string{resourcev3.ListenerType, resourcev3.RouteType} {
		snap.Resources[cachev3.GetResponseType(typ)] = cachev3.NewResources("v", out.Proxyless.ByType()[typ])
	}
	if err := snap.Consistent(); err == nil {
		t.Log("go-control-plane's Consistent now follows API listeners; xds.Consistent could defer to it")
	}
	noRoutes := &xds.Resources{Listeners: out.Proxyless.Listeners}
	if err := xds.Consistent(out.Shared, noRoutes); err == nil {
		t.Error("API listeners without their route configurations passed")
	}
	// The route configuration of an API listener counts as referenced
	// only through that listener.
	routesOnly := &xds.Resources{Routes: out.Proxyless.Routes}
	if err := xds.Consistent(out.Shared, routesOnly); err == nil {
		t.Error("a route configuration no listener refers to passed")
	}
}

// Policy keeps these out of proxyless routes; the translator refuses them
// too rather than serve a route gRPC would reject or follow differently.
func TestTranslateProxylessUnsupported(t *testing.T) {
	redirect := ir.Route{Source: "a.hcl:1", Match: ir.RouteMatch{PathPrefix: "/"}, Redirect: &ir.Redirect{Host: "x", Status: 301}}
	query := routeTo("/", ir.WeightedCluster{Name: "echo", Weight: 1})
	query.Match.Query = []ir.ValueMatch{{Name: "debug", Present: true}}
	for name, r := range map[string]ir.Route{"redirect": redirect, "query": query} {
		m := irtest.Reach(&ir.Model{Clusters: []*ir.Cluster{cluster("echo")}, Proxyless: []ir.Listener{apiListener("echo", r)}})
		if out, err := xds.Translate(m); err != nil || !errors.Is(out.ProxylessFailed, xds.ErrUnsupportedGRPC) || out.Proxyless != nil {
			t.Errorf("%s: Translate error = %v, want proxyless failed with ErrUnsupportedGRPC", name, err)
		}
	}
}

// gRPC's xDS client rejects an assignment with a locality missing or an
// address listed twice, and ignores localities without a weight.
func TestLoadAssignmentIsAcceptableToGRPC(t *testing.T) {
	heavy := ep("10.0.0.2", 0, "dc1")
	heavy.Weight = 5
	dup := ep("10.0.0.2", 0, "dc1")
	dup.Health = ir.Unhealthy
	noLocality := ir.Endpoint{Address: netip.MustParseAddr("10.0.0.9"), Port: 8080, Weight: 1, Priority: 1}
	out := translate(t, irtest.Reach(&ir.Model{Clusters: []*ir.Cluster{cluster("web", ep("10.0.0.1", 0, "dc1"), dup, heavy, noLocality)}}))
	cla := out.Shared.Endpoints[0]
	seen := map[string]bool{}
	for _, lle := range cla.GetEndpoints() {
		if lle.GetLocality() == nil {
			t.Errorf("priority %d: no locality", lle.GetPriority())
		}
		var sum uint32
		for _, e := range lle.GetLbEndpoints() {
			a := e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
			if seen[a] {
				t.Errorf("address %s listed twice", a)
			}
			seen[a] = true
			sum += e.GetLoadBalancingWeight().GetValue()
		}
		if w := lle.GetLoadBalancingWeight().GetValue(); w == 0 || w != sum {
			t.Errorf("locality %v weight %d, want the sum of its endpoints' weights %d", lle.GetLocality(), w, sum)
		}
	}
	kept := cla.GetEndpoints()[0].GetLbEndpoints()[1]
	if kept.GetHealthStatus().String() != "HEALTHY" || kept.GetLoadBalancingWeight().GetValue() != 5 {
		t.Errorf("of two registrations of 10.0.0.2:8080 the healthy, heavier one should stay; kept %v", kept)
	}
	if len(cla.GetEndpoints()) != 2 {
		t.Errorf("%d localities, want 2", len(cla.GetEndpoints()))
	}
}

func TestGRPCBootstrap(t *testing.T) {
	b, err := xds.GRPCBootstrap(xds.BootstrapConfig{NodeID: "app-1", Cluster: "grpc-app", XDS: []string{"127.0.0.1:18000", "bridge-b.internal:18000"}})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	want := map[string]any{
		"xds_servers": []any{
			map[string]any{"server_uri": "127.0.0.1:18000", "channel_creds": []any{map[string]any{"type": "insecure"}}, "server_features": []any{"xds_v3", "ignore_resource_deletion"}},
			map[string]any{"server_uri": "bridge-b.internal:18000", "channel_creds": []any{map[string]any{"type": "insecure"}}, "server_features": []any{"xds_v3", "ignore_resource_deletion"}},
		},
		// locality, empty: grpc-node refuses a node without one.
		"node": map[string]any{"id": "app-1", "cluster": "grpc-app", "locality": map[string]any{}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bootstrap (-want +got):\n%s", diff)
	}

	b, err = xds.GRPCBootstrap(xds.BootstrapConfig{NodeID: "app-1", XDSUnix: "/run/xds.sock", TLSCAFile: "/etc/ca.pem"})
	if err != nil {
		t.Fatal(err)
	}
	var tlsBoot struct {
		XDSServers []struct {
			ServerURI    string `json:"server_uri"`
			ChannelCreds []struct {
				Type   string            `json:"type"`
				Config map[string]string `json:"config"`
			} `json:"channel_creds"`
		} `json:"xds_servers"`
	}
	if err := json.Unmarshal(b, &tlsBoot); err != nil {
		t.Fatal(err)
	}
	if s := tlsBoot.XDSServers; len(s) != 1 || s[0].ServerURI != "unix:///run/xds.sock" || s[0].ChannelCreds[0].Type != "tls" || s[0].ChannelCreds[0].Config["ca_certificate_file"] != "/etc/ca.pem" {
		t.Errorf("unix + TLS bootstrap = %s", b)
	}

	for name, c := range map[string]xds.BootstrapConfig{
		"no node id": {XDS: []string{"127.0.0.1:1"}},
		"no server":  {NodeID: "a"},
		"bad port":   {NodeID: "a", XDS: []string{"127.0.0.1:x"}},
	} {
		if _, err := xds.GRPCBootstrap(c); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A proxyless group narrowed to some targets gets only their API
// listeners and routes, and only the clusters those reach; the proxyless
// clients in general keep every target.
func TestProxylessGroupNarrowed(t *testing.T) {
	m := proxylessModel()
	m.Clusters = append(m.Clusters, cluster("web"))
	m.Proxyless = append(m.Proxyless, apiListener("web", routeTo("/", ir.WeightedCluster{Name: "web", Weight: 1})))
	m.Groups = append(m.Groups, ir.Group{Name: "grpc-web", Proxyless: true, ProxylessTargets: []string{"web"}})
	slices.SortFunc(m.Groups, func(a, b ir.Group) int { return strings.Compare(a.Name, b.Name) })
	irtest.Reach(m)
	out := translate(t, m)
	g := out.Groups["grpc-web"]
	if names := []string{xds.ResourceName(g.Listeners[0]), xds.ResourceName(g.Routes[0])}; len(g.Listeners) != 1 || len(g.Routes) != 1 || names[0] != "web" || names[1] != "web" {
		t.Fatalf("narrowed group: %d listeners, %d routes (%v), want web's only", len(g.Listeners), len(g.Routes), names)
	}
	if r := out.Reach["grpc-web"]; len(r.Clusters) != 1 || r.Clusters[0].GetName() != "web" || len(r.Endpoints) != 1 {
		t.Fatalf("narrowed group reaches %d clusters, want web only", len(r.Clusters))
	}
	if n := len(out.ProxylessReach.Clusters); n != 3 {
		t.Fatalf("proxyless clients reach %d clusters, want all 3", n)
	}
	if !out.ProxylessGroups["grpc-web"] || !out.ProxylessGroups["grpc-*"] || out.ProxylessGroups["edge"] {
		t.Fatalf("ProxylessGroups = %v", out.ProxylessGroups)
	}
}
