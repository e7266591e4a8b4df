package xds

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetworkv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Gateway groups (Consul's gateways): one listener, read by the TLS
// inspector, with one filter chain per service matched by its mesh SNI.
// A terminating gateway's chain is what the service's own sidecar's
// public listener would be (mutual TLS with the service's leaf against
// the Connect roots, then its intentions as RBAC) forwarding to the
// service's external instances instead of a local application.

// addGatewayListener adds g's gateway listener (and, for HTTP chains,
// their route configurations) to r and fresh; nothing for other groups.
func addGatewayListener(g *ir.Group, r, fresh *Resources, rbacs rbacMemo) error {
	gw := g.Gateway
	if gw == nil {
		return nil
	}
	name := ir.GatewayListenerName(g.Name)
	l := &listenerv3.Listener{
		Name:             name,
		Address:          socketAddress(gw.Address, gw.Port),
		TrafficDirection: corev3.TrafficDirection_INBOUND,
		ListenerFilters: []*listenerv3.ListenerFilter{{
			Name:       wellknown.TLSInspector,
			ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&tlsinspectorv3.TlsInspector{})},
		}},
	}
	if gw.Kind == ir.GatewayMesh {
		// Consul's mesh gateway listener has no traffic direction.
		l.TrafficDirection = corev3.TrafficDirection_UNSPECIFIED
	}
	for i := range gw.Chains {
		c := &gw.Chains[i]
		if gw.Kind == ir.GatewayMesh {
			l.FilterChains = append(l.FilterChains, passthroughChain(c))
			continue
		}
		fc, route, err := terminatingChain(name, c, rbacs)
		if err != nil {
			return fmt.Errorf("gateway listener %q chain %q: %w", name, c.SNI, err)
		}
		l.FilterChains = append(l.FilterChains, fc)
		if route != nil {
			r.addRouteSources(route)
			rc := buildRouteConfig(route, false)
			r.Routes = append(r.Routes, rc)
			fresh.Routes = append(fresh.Routes, rc)
		}
	}
	fallback, err := denyAllChain(name, gw.Kind)
	if err != nil {
		return err
	}
	l.FilterChains = append(l.FilterChains, fallback)
	r.Listeners = append(r.Listeners, l)
	fresh.Listeners = append(fresh.Listeners, l)
	return nil
}

// terminatingChain is one linked service's chain; for an HTTP-like
// service also the route configuration its connection manager asks for
// (named by the SNI, as Consul names it).
func terminatingChain(listener string, c *ir.GatewayChain, rbacs rbacMemo) (*listenerv3.FilterChain, *ir.Listener, error) {
	// The mesh's mutual TLS, as a sidecar's public listener: the linked
	// service's leaf, client certificates chaining to the Connect roots.
	tls := &ir.DownstreamTLS{DefaultCertificate: c.CertificateSecret, ClientCASecret: ir.RootsSecretName}
	fc := &listenerv3.FilterChain{
		Name:             c.SNI,
		FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{c.SNI}},
		TransportSocket:  downstreamTLS(tls, c.CertificateSecret),
	}
	if !ir.HTTPProtocol(c.Protocol) {
		rbac, err := rbacs.network(c.Intentions)
		if err != nil {
			return nil, nil, err
		}
		tp := &tcpproxyv3.TcpProxy{StatPrefix: "upstream." + c.SNI, ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: c.Cluster}}
		fc.Filters = []*listenerv3.Filter{
			{Name: wellknown.RoleBasedAccessControl, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: rbac}},
			{Name: wellknown.TCPProxy, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(tp)}},
		}
		return fc, nil, nil
	}
	rbac, err := rbacs.httpFilter(c.Intentions)
	if err != nil {
		return nil, nil, err
	}
	route := &ir.Listener{Name: c.SNI, Protocol: "http", VirtualHosts: []ir.VirtualHost{{
		Name: c.Service, Domains: []string{"*"}, Routes: []ir.Route{{
			Name: c.Service + "/0", Source: "terminating gateway " + listener,
			Clusters: []ir.WeightedCluster{{Name: c.Cluster, Weight: 1}},
		}},
	}}}
	hcm := buildHCM(route)
	// The RBAC, then the router, as Consul: the gateway's one route has
	// no per-route configuration for other filters to act on.
	hcm.HttpFilters = []*hcmv3.HttpFilter{rbac, routerHTTPFilter()}
	// Tell the service who called, as Consul's terminating gateway does
	// for every HTTP-like protocol (gRPC included, unlike its sidecars).
	hcm.ForwardClientCertDetails = hcmv3.HttpConnectionManager_APPEND_FORWARD
	hcm.SetCurrentClientCertDetails = &hcmv3.HttpConnectionManager_SetCurrentClientCertDetails{
		Subject: wrapperspb.Bool(true), Cert: true, Chain: true, Dns: true, Uri: true,
	}
	fc.Filters = []*listenerv3.Filter{{Name: wellknown.HTTPConnectionManager, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)}}}
	return fc, route, nil
}

// passthroughChain is a mesh gateway's chain of one service: the
// connection, TLS untouched, to the service's sidecars.
func passthroughChain(c *ir.GatewayChain) *listenerv3.FilterChain {
	prefix := "mesh_gateway_local." + c.SNI
	if c.Datacenter != "" {
		prefix = "mesh_gateway_remote.default." + c.Datacenter // Consul's
	}
	tp := &tcpproxyv3.TcpProxy{StatPrefix: prefix, ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: c.Cluster}}
	return &listenerv3.FilterChain{
		Name:             c.SNI,
		FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{c.SNI}},
		Filters:          []*listenerv3.Filter{{Name: wellknown.TCPProxy, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(tp)}}},
	}
}

// denyAllChain takes the connections no service's chain matches, so the
// port answers (health checks connect) but nothing passes. Consul puts an
// sni_cluster passthrough here; the bridge refuses instead: on a
// terminating gateway that passthrough would reach, by the SNI it is
// sent, any cluster of the gateway without its chain's mutual TLS and
// intentions, and a mesh gateway has a chain for every service it
// routes to.
func denyAllChain(listener, kind string) (*listenerv3.FilterChain, error) {
	// An ALLOW RBAC with no policy matches nobody: every connection is
	// closed before the TCP proxy runs.
	rbac := &rbacnetworkv3.RBAC{StatPrefix: rbacStatPrefix, Rules: &rbacv3.RBAC{Action: rbacv3.RBAC_ALLOW}}
	prefix := "terminating_gateway."
	if kind == ir.GatewayMesh {
		prefix = "mesh_gateway_local."
	}
	tp := &tcpproxyv3.TcpProxy{StatPrefix: prefix, ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: ""}}
	return &listenerv3.FilterChain{
		Name: listener + "/no-match",
		Filters: []*listenerv3.Filter{
			{Name: wellknown.RoleBasedAccessControl, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(rbac)}},
			{Name: wellknown.TCPProxy, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(tp)}},
		},
	}, nil
}

// upstreamTLSFiles is TLS to an external service from files on the
// gateway's host, as Consul's makeCommonTLSContextFromFiles: the CA
// verifies the peer (and the SNI, when given, is the name its
// certificate must carry), the certificate and key are presented when
// both are given.
func upstreamTLSFiles(t *ir.UpstreamTLS) *corev3.TransportSocket {
	file := func(p string) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: p}}
	}
	vc := &tlsv3.CertificateValidationContext{TrustedCa: file(t.Files.CA)}
	if t.SNI != "" {
		vc.MatchTypedSubjectAltNames = sniMatcher(t.SNI)
	}
	common := &tlsv3.CommonTlsContext{
		TlsParams:             &tlsv3.TlsParameters{},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc},
	}
	if t.Files.Cert != "" && t.Files.Key != "" {
		common.TlsCertificates = []*tlsv3.TlsCertificate{{CertificateChain: file(t.Files.Cert), PrivateKey: file(t.Files.Key)}}
	}
	// No ALPN, as Consul: an http2 or grpc service's cluster speaks HTTP/2
	// by its protocol options.
	return tlsSocket(&tlsv3.UpstreamTlsContext{Sni: t.SNI, CommonTlsContext: common})
}
