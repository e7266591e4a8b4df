package xds_test

import (
	"testing"
	"time"

	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

const corsFilter = "envoy.filters.http.cors"

// envoyFilterOrder is the fixed HTTP filter chain of every Envoy
// listener that configures no listener-wide feature.
var envoyFilterOrder = []string{corsFilter, faultFilter, wellknown.Router}

var testCORS = &ir.CORS{
	AllowOrigins:     []string{"https://shop.example.com"},
	AllowOriginRegex: []string{`^https://[a-z]+\.example\.com$`},
	AllowMethods:     []string{"GET", "POST"},
	AllowHeaders:     []string{"content-type"},
	ExposeHeaders:    []string{"x-request-id"},
	MaxAge:           10 * time.Minute,
	AllowCredentials: true,
}

// featureModel is one Envoy listener with one route to "web", changed by
// mutate.
func featureModel(mutate func(l *ir.Listener)) *ir.Model {
	l := httpListener("edge.http", routeTo("/", ir.WeightedCluster{Name: "web", Weight: 1}))
	if mutate != nil {
		mutate(&l)
	}
	return &ir.Model{Clusters: []ir.Cluster{cluster("web")}, Groups: []ir.Group{{Name: "edge", Listeners: []ir.Listener{l}}}}
}

// Turning a per-route or per-virtual-host feature on changes the route
// configuration only: the listener (and so its version) stays the same,
// so Envoy does not drain it.
func TestPerRouteFeaturesChangeRoutesOnly(t *testing.T) {
	tests := map[string]func(l *ir.Listener){
		"route cors":        func(l *ir.Listener) { l.VirtualHosts[0].Routes[0].HTTP.CORS = testCORS },
		"virtual host cors": func(l *ir.Listener) { l.VirtualHosts[0].HTTP.CORS = testCORS },
		"route upgrades":    func(l *ir.Listener) { l.VirtualHosts[0].Routes[0].HTTP.Upgrades = []string{"websocket"} },
	}
	before := translate(t, featureModel(nil))
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			after := translate(t, featureModel(mutate))
			if len(after.Failed) > 0 {
				t.Fatalf("failed: %v", after.Failed)
			}
			if diff := cmp.Diff(before.Groups["edge"].Listeners, after.Groups["edge"].Listeners, protocmp.Transform()); diff != "" {
				t.Errorf("the listener changed (Envoy would drain it):\n%s", diff)
			}
			if proto.Equal(before.Groups["edge"].Routes[0], after.Groups["edge"].Routes[0]) {
				t.Error("the route configuration did not change")
			}
		})
	}
}

// Upgrades: a listener's allow them on every route (connection manager
// upgrade_configs), a route's on that route only (route action).
func TestUpgrades(t *testing.T) {
	out := translate(t, featureModel(func(l *ir.Listener) {
		l.HTTP.Upgrades = []string{"websocket"}
		l.VirtualHosts[0].Routes[0].HTTP.Upgrades = []string{"spdy/3"}
	}))
	hcm := hcmOf(t, out.Groups["edge"].Listeners[0])
	if got := hcm.GetUpgradeConfigs(); len(got) != 1 || got[0].GetUpgradeType() != "websocket" || got[0].GetEnabled() != nil {
		t.Errorf("listener upgrade_configs = %v, want websocket", got)
	}
	ra := out.Groups["edge"].Routes[0].GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
	if got := ra.GetUpgradeConfigs(); len(got) != 1 || got[0].GetUpgradeType() != "spdy/3" || !got[0].GetEnabled().GetValue() {
		t.Errorf("route upgrade_configs = %v, want spdy/3 enabled", got)
	}
}

func perFilter[T proto.Message](t *testing.T, m map[string]*anypb.Any, name string, into T) T {
	t.Helper()
	a, ok := m[name]
	if !ok {
		t.Fatalf("no typed_per_filter_config for %s in %v", name, m)
	}
	if err := a.UnmarshalTo(into); err != nil {
		t.Fatal(err)
	}
	return into
}

// A CORS policy reaches Envoy as the CORS filter's per-route config of the
// route or virtual host that sets it, every field carried over.
func TestCORSPolicy(t *testing.T) {
	out := translate(t, featureModel(func(l *ir.Listener) {
		l.VirtualHosts[0].HTTP.CORS = testCORS
		l.VirtualHosts[0].Routes[0].HTTP.CORS = &ir.CORS{AllowOrigins: []string{"*"}}
	}))
	rc := out.Groups["edge"].Routes[0]
	want := &corsv3.CorsPolicy{
		AllowOriginStringMatch: []*matcherv3.StringMatcher{
			{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "https://shop.example.com"}},
			{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: `^https://[a-z]+\.example\.com$`}}},
		},
		AllowMethods:     "GET,POST",
		AllowHeaders:     "content-type",
		ExposeHeaders:    "x-request-id",
		MaxAge:           "600",
		AllowCredentials: wrapperspb.Bool(true),
	}
	got := perFilter(t, rc.GetVirtualHosts()[0].GetTypedPerFilterConfig(), corsFilter, &corsv3.CorsPolicy{})
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("virtual host CORS policy (-want +got):\n%s", diff)
	}
	route := perFilter(t, rc.GetVirtualHosts()[0].GetRoutes()[0].GetTypedPerFilterConfig(), corsFilter, &corsv3.CorsPolicy{})
	if diff := cmp.Diff(&corsv3.CorsPolicy{AllowOriginStringMatch: []*matcherv3.StringMatcher{{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "*"}}}}, route, protocmp.Transform()); diff != "" {
		t.Errorf("route CORS policy (-want +got):\n%s", diff)
	}
}
