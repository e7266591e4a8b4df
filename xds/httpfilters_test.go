package xds_test

import (
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	compressorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	localratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

const corsFilter = "envoy.filters.http.cors"

// envoyFilterOrder is the fixed HTTP filter chain of every Envoy
// listener that configures no listener-wide feature.
var envoyFilterOrder = []string{corsFilter, localRateLimitFilter, faultFilter, wellknown.Router}

const localRateLimitFilter = "envoy.filters.http.local_ratelimit"

var testRateLimit = &ir.LocalRateLimit{
	Requests: 10, Interval: time.Second, Burst: 20, Status: 503,
	ResponseHeaders:  map[string]string{"x-limited": "1"},
	RateLimitHeaders: true,
	Descriptors: []ir.RateLimitDescriptor{
		{Header: "x-api-key", Requests: 5, Interval: 2 * time.Second, Burst: 5},
		{Header: "x-api-key", Value: "gold", Requests: 100, Interval: time.Second, Burst: 100},
		{ClientAddress: true, Requests: 1, Interval: time.Second, Burst: 1},
	},
}

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
	// The group gets what its listener uses (model's reach, issue 16).
	return &ir.Model{Clusters: []*ir.Cluster{cluster("web")}, Groups: []ir.Group{{Name: "edge", Listeners: []ir.Listener{l}, Clusters: l.ClusterRefs()}}}
}

// Turning a per-route or per-virtual-host feature on changes the route
// configuration only: the listener (and so its version) stays the same,
// so Envoy does not drain it.
func TestPerRouteFeaturesChangeRoutesOnly(t *testing.T) {
	tests := map[string]func(l *ir.Listener){
		"route cors":        func(l *ir.Listener) { l.VirtualHosts[0].Routes[0].HTTP.CORS = testCORS },
		"virtual host cors": func(l *ir.Listener) { l.VirtualHosts[0].HTTP.CORS = testCORS },
		"route rate_limit":  func(l *ir.Listener) { l.VirtualHosts[0].Routes[0].HTTP.RateLimit = testRateLimit },
		"vhost rate_limit":  func(l *ir.Listener) { l.VirtualHosts[0].HTTP.RateLimit = testRateLimit },
		"route compression off": func(l *ir.Listener) {
			l.VirtualHosts[0].Routes[0].HTTP.NoCompression = true
		},
		"route upgrades": func(l *ir.Listener) { l.VirtualHosts[0].Routes[0].HTTP.Upgrades = []string{"websocket"} },
	}
	// With compression on the listener, so that turning it off for a
	// route is meaningful.
	withCompression := func(l *ir.Listener) { l.HTTP.Compression = &ir.Compression{Algorithms: []string{"gzip"}} }
	before := translate(t, featureModel(withCompression))
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			after := translate(t, featureModel(func(l *ir.Listener) { withCompression(l); mutate(l) }))
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

// A local rate limit: the bucket, enabled and enforced for every request,
// the status and headers of limited responses, and one descriptor per
// block with the filter's own actions producing its entries.
func TestLocalRateLimit(t *testing.T) {
	out := translate(t, featureModel(func(l *ir.Listener) { l.VirtualHosts[0].Routes[0].HTTP.RateLimit = testRateLimit }))
	got := perFilter(t, out.Groups["edge"].Routes[0].GetVirtualHosts()[0].GetRoutes()[0].GetTypedPerFilterConfig(), localRateLimitFilter, &localratelimitv3.LocalRateLimit{})
	all := &corev3.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{Numerator: 100}}
	bucket := func(n, burst uint32, d time.Duration) *typev3.TokenBucket {
		return &typev3.TokenBucket{MaxTokens: burst, TokensPerFill: wrapperspb.UInt32(n), FillInterval: durationpb.New(d)}
	}
	entry := func(k, v string) []*ratelimitv3.RateLimitDescriptor_Entry {
		return []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}
	}
	want := &localratelimitv3.LocalRateLimit{
		StatPrefix:     "local_rate_limit",
		Status:         &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
		TokenBucket:    bucket(10, 20, time.Second),
		FilterEnabled:  all,
		FilterEnforced: all,
		ResponseHeadersToAdd: []*corev3.HeaderValueOption{{
			Header: &corev3.HeaderValue{Key: "x-limited", Value: "1"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}},
		EnableXRatelimitHeaders: ratelimitv3.XRateLimitHeadersRFCVersion_DRAFT_VERSION_03,
		Descriptors: []*ratelimitv3.LocalRateLimitDescriptor{
			{Entries: entry("x-api-key", ""), TokenBucket: bucket(5, 5, 2*time.Second)},
			{Entries: entry("x-api-key", "gold"), TokenBucket: bucket(100, 100, time.Second)},
			{Entries: entry("remote_address", ""), TokenBucket: bucket(1, 1, time.Second)},
		},
		RateLimits: []*routev3.RateLimit{
			{Actions: []*routev3.RateLimit_Action{{ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{HeaderName: "x-api-key", DescriptorKey: "x-api-key"}}}}},
			{Actions: []*routev3.RateLimit_Action{{ActionSpecifier: &routev3.RateLimit_Action_RemoteAddress_{RemoteAddress: &routev3.RateLimit_Action_RemoteAddress{}}}}},
		},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("route local rate limit (-want +got):\n%s", diff)
	}
	// Without a listener rate_limit, the listener's filter limits nothing.
	for _, f := range hcmOf(t, out.Groups["edge"].Listeners[0]).GetHttpFilters() {
		if f.GetName() != localRateLimitFilter {
			continue
		}
		inert := &localratelimitv3.LocalRateLimit{}
		if err := f.GetTypedConfig().UnmarshalTo(inert); err != nil {
			t.Fatal(err)
		}
		if inert.GetTokenBucket() != nil || inert.GetFilterEnabled() != nil {
			t.Errorf("listener filter without rate_limit is not inert: %v", inert)
		}
	}
	// A listener's rate_limit is the filter's own config.
	out = translate(t, featureModel(func(l *ir.Listener) { l.HTTP.RateLimit = testRateLimit }))
	for _, f := range hcmOf(t, out.Groups["edge"].Listeners[0]).GetHttpFilters() {
		if f.GetName() == localRateLimitFilter {
			got := &localratelimitv3.LocalRateLimit{}
			if err := f.GetTypedConfig().UnmarshalTo(got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("listener local rate limit (-want +got):\n%s", diff)
			}
		}
	}
}

// Compression: one compressor filter per algorithm, in the listed order
// (the first preferred), between the fault filter and the router; a
// route turns every one of them off.
func TestCompression(t *testing.T) {
	out := translate(t, featureModel(func(l *ir.Listener) {
		l.HTTP.Compression = &ir.Compression{Algorithms: []string{"brotli", "gzip"}, ContentTypes: []string{"application/json"}, MinLength: 1024}
		l.VirtualHosts[0].Routes[0].HTTP.NoCompression = true
	}))
	hcm := hcmOf(t, out.Groups["edge"].Listeners[0])
	want := []string{corsFilter, localRateLimitFilter, faultFilter, "envoy.filters.http.compressor.brotli", "envoy.filters.http.compressor.gzip", wellknown.Router}
	if diff := cmp.Diff(want, filterNames(hcm)); diff != "" {
		t.Errorf("filters (-want +got):\n%s", diff)
	}
	br := &compressorv3.Compressor{}
	if err := hcm.GetHttpFilters()[3].GetTypedConfig().UnmarshalTo(br); err != nil {
		t.Fatal(err)
	}
	if !br.GetChooseFirst() || br.GetCompressorLibrary().GetName() != "envoy.compression.brotli.compressor" ||
		br.GetResponseDirectionConfig().GetCommonConfig().GetMinContentLength().GetValue() != 1024 ||
		!slices.Equal(br.GetResponseDirectionConfig().GetCommonConfig().GetContentType(), []string{"application/json"}) {
		t.Errorf("brotli compressor = %v", br)
	}
	route := out.Groups["edge"].Routes[0].GetVirtualHosts()[0].GetRoutes()[0]
	for _, a := range []string{"gzip", "brotli", "zstd"} {
		off := perFilter(t, route.GetTypedPerFilterConfig(), "envoy.filters.http.compressor."+a, &compressorv3.CompressorPerRoute{})
		if !off.GetDisabled() {
			t.Errorf("%s not disabled for the route: %v", a, off)
		}
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
