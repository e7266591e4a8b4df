package xds

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// The proxyless gRPC mesh (ir/meshgrpc.go). What grpc-go takes, from its
// xdsresource package (unmarshal_lds.go, filter_chain.go, unmarshal_cds.go)
// and gRFCs A29, A36 and A41, and so what is built here:
//
//   - The server's Listener is named by its listening address and carries
//     that address and port (grpc-go compares them with the address it
//     listens on and stops serving on a mismatch); no listener filters, no
//     use_original_dst; filter chains without destination_port, server
//     names or application protocols (those are dropped); exactly one
//     network filter, the HTTP connection manager, whose route config may
//     be inline (used here: one LDS update carries an intention change,
//     with nothing else to fetch) and whose routes must take
//     non_forwarding_action (a route action fails every RPC); HTTP
//     filters supported server side (RBAC is) ending with the router.
//   - Its DownstreamTlsContext: tls_certificate_provider_instance (SDS is
//     NACKed), validation_context.ca_certificate_provider_instance, no
//     match_subject_alt_names (NACKed server side: who may call is RBAC's
//     job), require_client_certificate (which needs the CA provider), no
//     require_sni, no tls_params.
//   - RBAC (A41): no condition, no header matchers on grpc-* or :scheme;
//     authenticated.principal_name matches the client's URI SANs first.
//   - A client's UpstreamTlsContext: the same provider instances; the
//     server's identity goes in validation_context.match_subject_alt_names,
//     the deprecated field, because grpc-go reads only that one (not
//     match_typed_subject_alt_names) and matches it against every SAN.

// translateMeshGRPCServers builds the inbound listeners of the mesh's
// proxyless gRPC servers, sorted by name: one per instance, named by its
// registered address, and, for servers that bind every address
// (0.0.0.0:PORT, or [::]:PORT, which is what Go's ":PORT" reports),
// wildcard listeners per port with one filter chain per instance on that
// port, chosen by the address the connection came in on (destination
// prefix ranges, which grpc-go matches). A connection to an address no
// instance is registered with matches no chain and is closed.
func translateMeshGRPCServers(m *ir.Model, rbacs rbacMemo) ([]*listenerv3.Listener, error) {
	var out []*listenerv3.Listener
	var errs []error
	type wildcard struct {
		addr   netip.Addr
		port   uint32
		chains []*listenerv3.FilterChain
	}
	wild := map[string]*wildcard{} // listener name -> chains
	for i := range m.MeshGRPCServers {
		s := &m.MeshGRPCServers[i]
		fc, err := meshGRPCFilterChain(s, rbacs)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, &listenerv3.Listener{
			Name:             s.ListenerName(),
			Address:          socketAddress(s.Address.String(), s.Port),
			TrafficDirection: corev3.TrafficDirection_INBOUND,
			FilterChains:     []*listenerv3.FilterChain{fc},
		})
		bits := 32
		wildAddrs := []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()}
		if s.Address.Is6() {
			bits, wildAddrs = 128, wildAddrs[1:] // an IPv4 bind takes no IPv6 connection
		}
		for _, wa := range wildAddrs {
			name := (&ir.MeshGRPCServer{Address: wa, Port: s.Port}).ListenerName()
			w := wild[name]
			if w == nil {
				w = &wildcard{addr: wa, port: s.Port}
				wild[name] = w
			}
			chain := proto.Clone(fc).(*listenerv3.FilterChain)
			chain.Name = s.Service + "@" + s.Address.String()
			chain.FilterChainMatch = &listenerv3.FilterChainMatch{PrefixRanges: []*corev3.CidrRange{{
				AddressPrefix: s.Address.String(), PrefixLen: wrapperspb.UInt32(uint32(bits)),
			}}}
			w.chains = append(w.chains, chain)
		}
	}
	for name, w := range wild {
		if slices.ContainsFunc(m.MeshGRPCServers, func(s ir.MeshGRPCServer) bool { return s.ListenerName() == name }) {
			continue // an instance registered with the wildcard address itself: its own listener
		}
		out = append(out, &listenerv3.Listener{
			Name:             name,
			Address:          socketAddress(w.addr.String(), w.port),
			TrafficDirection: corev3.TrafficDirection_INBOUND,
			FilterChains:     w.chains,
		})
	}
	slices.SortFunc(out, func(a, b *listenerv3.Listener) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, errors.Join(errs...)
}

// addMeshGRPCServers adds the servers' listeners to the proxyless
// resources, keeping them sorted by name. The server listeners carry no
// secret (only provider instance names) and their RBAC rules say no more
// than Consul's intentions, which every mesh service may read; they go
// with the API listeners to every proxyless node that asks by name.
func addMeshGRPCServers(r *Resources, m *ir.Model, rbacs rbacMemo) error {
	if len(m.MeshGRPCServers) == 0 {
		return nil
	}
	ls, err := translateMeshGRPCServers(m, rbacs)
	if err != nil {
		return fmt.Errorf("mesh gRPC servers: %w", err)
	}
	r.Listeners = append(r.Listeners, ls...)
	slices.SortFunc(r.Listeners, func(a, b *listenerv3.Listener) int { return strings.Compare(a.GetName(), b.GetName()) })
	for i := 1; i < len(r.Listeners); i++ {
		if r.Listeners[i].GetName() == r.Listeners[i-1].GetName() {
			return fmt.Errorf("mesh gRPC server listener %q is also an API listener's name: %w", r.Listeners[i].GetName(), ir.ErrDuplicate)
		}
	}
	return validateAll(&Resources{Listeners: ls})
}

// meshGRPCFilterChain is the filter chain of one server instance: mutual
// TLS and its intentions as HTTP RBAC.
func meshGRPCFilterChain(s *ir.MeshGRPCServer, rbacs rbacMemo) (*listenerv3.FilterChain, error) {
	// The same RBAC as Envoy sidecars get (intentions.go): grpc-go
	// enforces the HTTP RBAC filter of its inbound listener (gRFC A41).
	rbac, err := rbacs.httpFilter(s.Intentions)
	if err != nil {
		return nil, fmt.Errorf("mesh gRPC server %q (%s): %w", s.Service, s.ListenerName(), err)
	}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: s.Service,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: s.ListenerName(),
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    s.Service,
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_NonForwardingAction{NonForwardingAction: &routev3.NonForwardingAction{}},
				}},
			}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{rbac, routerHTTPFilter()},
	}
	return &listenerv3.FilterChain{
		Name: "mesh",
		Filters: []*listenerv3.Filter{{
			Name:       wellknown.HTTPConnectionManager,
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
		}},
		TransportSocket: tlsSocket(&tlsv3.DownstreamTlsContext{
			// A client without a certificate is refused in the
			// handshake: RBAC's principals are certificate identities.
			RequireClientCertificate: wrapperspb.Bool(true),
			CommonTlsContext:         meshGRPCTLS(MeshCertProvider, nil),
		}),
	}, nil
}

// meshGRPCTLS is the common TLS context of the mesh's gRPC peers: the
// bootstrap's certificate provider instance for the identity and the
// roots; san, if set, is the peer identity a client requires.
func meshGRPCTLS(instance string, sans []*matcherv3.StringMatcher) *tlsv3.CommonTlsContext {
	provider := &tlsv3.CertificateProviderPluginInstance{InstanceName: instance}
	vc := &tlsv3.CertificateValidationContext{CaCertificateProviderInstance: provider}
	if len(sans) > 0 {
		vc.MatchSubjectAltNames = sans //nolint:staticcheck // the field grpc-go reads (see above)
	}
	return &tlsv3.CommonTlsContext{
		TlsCertificateProviderInstance: provider,
		ValidationContextType:          &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc},
	}
}

// meshGRPCUpstreamTLS is the transport socket of a mesh gRPC cluster
// (ir.UpstreamTLS.CertificateProvider set).
func meshGRPCUpstreamTLS(t *ir.UpstreamTLS) *corev3.TransportSocket {
	var sans []*matcherv3.StringMatcher
	for _, s := range t.MatchURISANs {
		sans = append(sans, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}})
	}
	return tlsSocket(&tlsv3.UpstreamTlsContext{Sni: t.SNI, CommonTlsContext: meshGRPCTLS(t.CertificateProvider, sans)})
}
