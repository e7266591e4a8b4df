package xds

import (
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// The HTTP filters of Envoy listeners and their per-route settings.
//
// Every filter a route or virtual host can turn on is installed on every
// Envoy HTTP listener, inert until typed_per_filter_config in RDS
// configures it (as the fault filter always was): turning CORS or a rate
// limit on for one route changes the route configuration only, never the
// listener, which Envoy would drain. Filters that only a listener
// configures (compression, access logs) are there when it does.
//
// The order is fixed:
//
//	cors -> fault -> router
//
// CORS comes first so that a preflight (which browsers send without
// credentials) is answered before authentication or a rate limit could
// refuse it, as Envoy Gateway orders them.

// Filter names, the keys of typed_per_filter_config.
const (
	corsFilter = "envoy.filters.http.cors"
)

// envoyHTTPFilters is the HTTP filter chain of an Envoy listener.
func envoyHTTPFilters(l *ir.Listener) []*hcmv3.HttpFilter {
	return []*hcmv3.HttpFilter{
		typedHTTPFilter(corsFilter, &corsv3.Cors{}),
		faultHTTPFilter(),
		routerHTTPFilter(),
	}
}

func typedHTTPFilter(name string, cfg proto.Message) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(cfg)}}
}

// listenerHTTPFeatures sets what a listener configures for all its routes
// on its HTTP connection manager.
func listenerHTTPFeatures(hcm *hcmv3.HttpConnectionManager, h *ir.ListenerHTTP) {
	for _, u := range h.Upgrades {
		hcm.UpgradeConfigs = append(hcm.UpgradeConfigs, &hcmv3.HttpConnectionManager_UpgradeConfig{UpgradeType: u})
	}
}

// perFilterConfig adds the typed per-filter config of a virtual host's
// or route's settings to m (nil for none yet); nil when there is none.
func perFilterConfig(p *ir.PerRoute, m map[string]*anypb.Any) map[string]*anypb.Any {
	add := func(name string, cfg *anypb.Any) {
		if m == nil {
			m = map[string]*anypb.Any{}
		}
		m[name] = cfg
	}
	if c := p.CORS; c != nil {
		add(corsFilter, mustAny(buildCORS(c)))
	}
	return m
}

// routeHTTPFeatures sets a route's own HTTP settings on its action.
func routeHTTPFeatures(out *routev3.Route, p *ir.PerRoute) {
	// A route may enable an upgrade its listener does not: Envoy's
	// connection manager lets the route's upgrade_configs decide first
	// (HttpConnectionManagerConfig::createUpgradeFilterChain), so this
	// stays an RDS change.
	if a := out.GetRoute(); a != nil {
		for _, u := range p.Upgrades {
			a.UpgradeConfigs = append(a.UpgradeConfigs, &routev3.RouteAction_UpgradeConfig{UpgradeType: u, Enabled: wrapperspb.Bool(true)})
		}
	}
}

func buildCORS(c *ir.CORS) *corsv3.CorsPolicy {
	out := &corsv3.CorsPolicy{
		AllowMethods:  strings.Join(c.AllowMethods, ","),
		AllowHeaders:  strings.Join(c.AllowHeaders, ","),
		ExposeHeaders: strings.Join(c.ExposeHeaders, ","),
	}
	for _, o := range c.AllowOrigins {
		out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, exactMatcher(o))
	}
	for _, re := range c.AllowOriginRegex {
		out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}})
	}
	if c.MaxAge > 0 {
		out.MaxAge = strconv.FormatInt(int64(c.MaxAge.Seconds()), 10)
	}
	if c.AllowCredentials {
		out.AllowCredentials = wrapperspb.Bool(true)
	}
	return out
}
