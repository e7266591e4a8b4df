package adsclient

import (
	"errors"
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Decoding and validating responses, and the references between
// resources that drive Envoy's subscriptions (protocol.go follows them).

func bodies(items []item) []*anypb.Any {
	out := make([]*anypb.Any, 0, len(items))
	for _, it := range items {
		if it.body != nil {
			out = append(out, it.body)
		}
	}
	return out
}

func decodeSotW(typeURL string, anys []*anypb.Any) ([]item, error) {
	items := make([]item, 0, len(anys))
	seen := make(map[string]bool, len(anys))
	for i, a := range anys {
		var it item
		if a.GetTypeUrl() == resourceWrapperType {
			// TTL-capable servers wrap resources; an empty wrapper is a
			// heartbeat that only refreshes the named resource.
			w := new(discoveryv3.Resource)
			if err := a.UnmarshalTo(w); err != nil {
				return nil, fmt.Errorf("resource %d: %w", i, err)
			}
			it.name = w.GetName()
			a = w.GetResource()
		}
		if a != nil {
			if err := decodeInto(&it, typeURL, a); err != nil {
				return nil, fmt.Errorf("resource %d: %w", i, err)
			}
		}
		if it.name == "" {
			return nil, fmt.Errorf("resource %d has no name", i)
		}
		if seen[it.name] {
			return nil, fmt.Errorf("duplicate resource name %q", it.name)
		}
		seen[it.name] = true
		items = append(items, it)
	}
	return items, nil
}

func decodeDelta(typeURL string, rs []*discoveryv3.Resource) ([]item, error) {
	items := make([]item, 0, len(rs))
	seen := make(map[string]bool, len(rs))
	for i, r := range rs {
		it := item{name: r.GetName(), version: r.GetVersion()}
		if r.GetResource() != nil {
			if err := decodeInto(&it, typeURL, r.GetResource()); err != nil {
				return nil, fmt.Errorf("resource %d (%q): %w", i, r.GetName(), err)
			}
		}
		if it.name == "" {
			return nil, fmt.Errorf("resource %d has no name", i)
		}
		if seen[it.name] {
			return nil, fmt.Errorf("duplicate resource name %q", it.name)
		}
		seen[it.name] = true
		items = append(items, it)
	}
	return items, nil
}

// decodeInto decodes and checks a resource body the way Envoy would before
// accepting it; the name it carries wins over an empty wrapper name.
func decodeInto(it *item, typeURL string, a *anypb.Any) error {
	if a.GetTypeUrl() != typeURL {
		return fmt.Errorf("type %q in a %s response", a.GetTypeUrl(), typeURL)
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return err
	}
	if err := validate(m); err != nil {
		return err
	}
	name := resourceName(m)
	if it.name == "" {
		it.name = name
	}
	switch r := m.(type) {
	case *clusterv3.Cluster:
		if r.GetType() == clusterv3.Cluster_EDS && r.GetEdsClusterConfig() == nil {
			return fmt.Errorf("cluster %q: cannot create an EDS cluster without an EDS config", name)
		}
		sockets := []*corev3.TransportSocket{r.GetTransportSocket()}
		for _, m := range r.GetTransportSocketMatches() {
			sockets = append(sockets, m.GetTransportSocket())
		}
		if it.secrets, err = secretNames(sockets); err != nil {
			return fmt.Errorf("cluster %q: %w", name, err)
		}
	case *listenerv3.Listener:
		if r.GetAddress() == nil && r.GetApiListener() == nil {
			return fmt.Errorf("listener %q: address is necessary", name)
		}
		if it.routes, err = routeNames(r); err != nil {
			return fmt.Errorf("listener %q: %w", name, err)
		}
		var sockets []*corev3.TransportSocket
		for _, fc := range r.GetFilterChains() {
			sockets = append(sockets, fc.GetTransportSocket())
		}
		sockets = append(sockets, r.GetDefaultFilterChain().GetTransportSocket())
		if it.secrets, err = secretNames(sockets); err != nil {
			return fmt.Errorf("listener %q: %w", name, err)
		}
	case *tlsv3.Secret:
		if r.GetType() == nil {
			return fmt.Errorf("secret %q: no certificate, validation context or other secret", name)
		}
	}
	it.msg = m
	it.body = a
	return nil
}

func validate(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		return v.ValidateAll()
	}
	return nil
}

func resourceName(m proto.Message) string {
	switch r := m.(type) {
	case *endpointv3.ClusterLoadAssignment:
		return r.GetClusterName()
	case interface{ GetName() string }:
		return r.GetName()
	}
	return ""
}

// edsName is the EDS resource an EDS cluster subscribes to.
func edsName(c *clusterv3.Cluster) (string, bool) {
	if c.GetType() != clusterv3.Cluster_EDS {
		return "", false
	}
	if n := c.GetEdsClusterConfig().GetServiceName(); n != "" {
		return n, true
	}
	return c.GetName(), true
}

// routeNames collects the RDS names of the HTTP connection managers of a
// listener. The HCMs are validated too, as Envoy builds them when it accepts
// the listener.
func routeNames(l *listenerv3.Listener) ([]string, error) {
	var anys []*anypb.Any
	if a := l.GetApiListener().GetApiListener(); a != nil {
		anys = append(anys, a)
	}
	chains := l.GetFilterChains()
	if dc := l.GetDefaultFilterChain(); dc != nil {
		chains = append(slices.Clip(chains), dc)
	}
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			if tc := f.GetTypedConfig(); tc != nil {
				anys = append(anys, tc)
			}
		}
	}
	var names []string
	for _, a := range anys {
		if a.GetTypeUrl() != hcmType {
			continue
		}
		h := new(hcmv3.HttpConnectionManager)
		if err := a.UnmarshalTo(h); err != nil {
			return nil, fmt.Errorf("http_connection_manager: %w", err)
		}
		if err := h.ValidateAll(); err != nil {
			return nil, fmt.Errorf("http_connection_manager: %w", err)
		}
		if rds := h.GetRds(); rds != nil {
			if rds.GetRouteConfigName() == "" {
				return nil, errors.New("http_connection_manager: rds without route_config_name")
			}
			names = append(names, rds.GetRouteConfigName())
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// secretNames collects the SDS secrets the TLS transport sockets name
// with an ADS sds_config (names without one refer to static secrets of
// the bootstrap). The TLS contexts are validated too, as Envoy builds
// them when it accepts the cluster or listener.
func secretNames(sockets []*corev3.TransportSocket) ([]string, error) {
	var names []string
	for _, ts := range sockets {
		tc := ts.GetTypedConfig()
		if tc == nil {
			continue
		}
		var common *tlsv3.CommonTlsContext
		switch tc.GetTypeUrl() {
		case upstreamTLSType:
			u := new(tlsv3.UpstreamTlsContext)
			if err := tc.UnmarshalTo(u); err != nil {
				return nil, fmt.Errorf("upstream TLS context: %w", err)
			}
			if err := u.ValidateAll(); err != nil {
				return nil, fmt.Errorf("upstream TLS context: %w", err)
			}
			common = u.GetCommonTlsContext()
		case downstreamTLSType:
			d := new(tlsv3.DownstreamTlsContext)
			if err := tc.UnmarshalTo(d); err != nil {
				return nil, fmt.Errorf("downstream TLS context: %w", err)
			}
			if err := d.ValidateAll(); err != nil {
				return nil, fmt.Errorf("downstream TLS context: %w", err)
			}
			common = d.GetCommonTlsContext()
		default:
			continue
		}
		configs := slices.Clone(common.GetTlsCertificateSdsSecretConfigs())
		configs = append(configs, common.GetValidationContextSdsSecretConfig(),
			common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig())
		for _, sc := range configs {
			if sc.GetName() != "" && sc.GetSdsConfig().GetAds() != nil {
				names = append(names, sc.GetName())
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}
