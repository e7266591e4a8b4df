package xds

import (
	"fmt"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// faultFilter is the HTTP fault filter's name; routes configure it per route.
const faultFilter = "envoy.filters.http.fault"

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		// Only fails for messages without a registered type, which would
		// be a programming error in this package, never bad input.
		panic(fmt.Sprintf("marshal %T: %v", m, err))
	}
	return a
}

func buildListener(l *ir.Listener) *listenerv3.Listener {
	var filter *listenerv3.Filter
	switch l.Protocol {
	case "tcp":
		filter = tcpProxyFilter(l)
	default:
		filter = &listenerv3.Filter{Name: wellknown.HTTPConnectionManager, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(buildHCM(l))}}
	}
	out := &listenerv3.Listener{
		Name:         l.Name,
		Address:      socketAddress(l.Address, l.Port),
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{filter}}},
	}
	if t := l.TLS; t != nil {
		out.FilterChains = tlsFilterChains(t, filter)
		// SNI is read by the TLS inspector before a filter chain is
		// chosen; Envoy no longer adds it by itself.
		out.ListenerFilters = []*listenerv3.ListenerFilter{{
			Name:       wellknown.TLSInspector,
			ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&tlsinspectorv3.TlsInspector{})},
		}}
	}
	return out
}

// tcpProxyFilter forwards a tcp listener's connections to its clusters.
func tcpProxyFilter(l *ir.Listener) *listenerv3.Filter {
	tp := &tcpproxyv3.TcpProxy{StatPrefix: l.Name}
	if len(l.TCP) == 1 {
		tp.ClusterSpecifier = &tcpproxyv3.TcpProxy_Cluster{Cluster: l.TCP[0].Name}
	} else {
		wc := &tcpproxyv3.TcpProxy_WeightedCluster{}
		for _, c := range l.TCP {
			wc.Clusters = append(wc.Clusters, &tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight{Name: c.Name, Weight: c.Weight})
		}
		tp.ClusterSpecifier = &tcpproxyv3.TcpProxy_WeightedClusters{WeightedClusters: wc}
	}
	if l.IdleTimeout > 0 {
		tp.IdleTimeout = durationpb.New(l.IdleTimeout)
	}
	return &listenerv3.Filter{Name: wellknown.TCPProxy, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(tp)}}
}

// tlsFilterChains is one filter chain per certificate selected by server
// name (in the order of ir.DownstreamTLS.SNI), then the chain of every
// other client with the default certificate. They all run the same
// network filter: the certificate is the only difference.
func tlsFilterChains(t *ir.DownstreamTLS, filter *listenerv3.Filter) []*listenerv3.FilterChain {
	var chains []*listenerv3.FilterChain
	for _, s := range t.SNI {
		chains = append(chains, &listenerv3.FilterChain{
			Name:             "sni:" + s.Secret,
			FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: s.ServerNames},
			Filters:          []*listenerv3.Filter{filter},
			TransportSocket:  downstreamTLS(t, s.Secret),
		})
	}
	return append(chains, &listenerv3.FilterChain{
		Name:            "default:" + t.DefaultCertificate,
		Filters:         []*listenerv3.Filter{filter},
		TransportSocket: downstreamTLS(t, t.DefaultCertificate),
	})
}

// httpFilters is the HTTP filter chain of a listener: the fault filter,
// then the router. Envoy listeners always install the fault filter, inert
// until a route's typed_per_filter_config turns it on, so the first fault
// added to a route changes RDS only: a changed listener would make Envoy
// drain its connections. API listeners (proxyless gRPC) install it only
// when a route uses it: gRPC does not drain, and a client without fault
// support then still accepts every listener that does not need it.
func httpFilters(l *ir.Listener, apiListener bool) []*hcmv3.HttpFilter {
	if !apiListener {
		return envoyHTTPFilters(l)
	}
	var filters []*hcmv3.HttpFilter
	if l.UsesFault {
		filters = append(filters, faultHTTPFilter())
	}
	return append(filters, routerHTTPFilter())
}

// faultHTTPFilter is an empty fault filter, which does nothing until a
// route's typed_per_filter_config turns it on.
func faultHTTPFilter() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: faultFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&faultv3.HTTPFault{})}}
}

func routerHTTPFilter() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: wellknown.Router, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}}
}

func buildHCM(l *ir.Listener) *hcmv3.HttpConnectionManager {
	filters := httpFilters(l, false)
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: l.Name,
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: l.Name,
		}},
		HttpFilters: filters,
		// Envoy's own recommendation for edge proxies: trust no
		// client-supplied X-Forwarded-For chain and normalise paths.
		UseRemoteAddress: wrapperspb.Bool(true),
		NormalizePath:    wrapperspb.Bool(true),
		MergeSlashes:     true,
		// Domains are written without ports; "shop.example.com" must match
		// "shop.example.com:8443" too. routematch mirrors this.
		StripPortMode: &hcmv3.HttpConnectionManager_StripAnyHostPort{StripAnyHostPort: true},
	}
	listenerHTTPFeatures(hcm, l.Name, &l.HTTP)
	return hcm
}
