package xds

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Proxyless gRPC clients (grpc-go, grpc-java, ... with an xDS bootstrap)
// resolve xds:///NAME by asking LDS for listener NAME. They want an API
// listener: no address, an HTTP connection manager whose routes come from
// RDS (RouteConfiguration NAME) and whose last filter is the router. The
// clusters and endpoints are the shared ones every proxy gets.

// ErrUnsupportedGRPC marks model details gRPC's xDS client rejects or
// ignores; policy validation keeps them out of grpc_service routes, so
// this only guards other producers of models.
var ErrUnsupportedGRPC = errors.New("not supported by gRPC's xDS client")

// translateProxyless builds the API listeners and their route
// configurations. It always returns non-nil Resources.
func translateProxyless(listeners []ir.Listener) (*Resources, error) {
	r := &Resources{}
	var errs []error
	for i := range listeners {
		l := &listeners[i]
		if err := unsupportedProxyless(l); err != nil {
			errs = append(errs, err)
		}
		r.Listeners = append(r.Listeners, buildAPIListener(l))
		r.Routes = append(r.Routes, buildRouteConfig(l, true))
	}
	if err := validateAll(r); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return r, fmt.Errorf("proxyless: %w", err)
	}
	return r, nil
}

// buildAPIListener is the LDS resource a gRPC client dialing
// xds:///NAME asks for. It carries none of buildHCM's edge settings:
// gRPC ignores most and NACKs some (xff_num_trusted_hops).
func buildAPIListener(l *ir.Listener) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: l.Name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: l.Name,
		}},
		HttpFilters: httpFilters(l),
	}
	return &listenerv3.Listener{
		Name:        l.Name,
		ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)},
	}
}

func unsupportedProxyless(l *ir.Listener) error {
	var errs []error
	bad := func(r *ir.Route, what string) {
		errs = append(errs, fmt.Errorf("API listener %q route %s: %s: %w", l.Name, r.Source, what, ErrUnsupportedGRPC))
	}
	for _, vh := range l.VirtualHosts {
		for i := range vh.Routes {
			r := &vh.Routes[i]
			switch {
			case len(r.Clusters) == 0:
				bad(r, "no cluster to route to (redirect or direct response)")
			case r.Rewrite != nil:
				bad(r, "rewrite")
			case r.Mirror != nil:
				bad(r, "mirror")
			case len(r.RequestHeaders.Add)+len(r.RequestHeaders.Set)+len(r.RequestHeaders.Remove) > 0,
				len(r.ResponseHeaders.Add)+len(r.ResponseHeaders.Set)+len(r.ResponseHeaders.Remove) > 0:
				bad(r, "header changes")
			case len(r.Match.Query) > 0:
				bad(r, "query match")
			case r.Match.Method != "":
				bad(r, "method match")
			case r.IdleTimeout != 0:
				bad(r, "idle timeout")
			case r.Retry != nil && r.Retry.PerTryTimeout > 0:
				bad(r, "per-try timeout")
			}
		}
	}
	return errors.Join(errs...)
}

// Consistent is Snapshot.Consistent for snapshots that may hold API
// listeners. go-control-plane only follows RDS references from listener
// filter chains, so it counts the routes of API listeners as unreferenced
// and rejects every proxyless snapshot. Here each API listener's HTTP
// connection manager is checked as if it were a filter chain, with
// go-control-plane's own rules. It also checks what go-control-plane does
// not: every SDS secret a listener or cluster names is in the snapshot,
// so no proxy waits forever for a certificate.
func Consistent(snap *cachev3.Snapshot) error {
	if snap == nil {
		return snap.Consistent()
	}
	if err := secretsConsistent(snap); err != nil {
		return err
	}
	typ := cachev3.GetResponseType(resourcev3.ListenerType)
	items := snap.Resources[typ].Items
	var shadow map[string]types.ResourceWithTTL
	for name, res := range items {
		l, ok := res.Resource.(*listenerv3.Listener)
		if !ok || l.GetApiListener().GetApiListener() == nil {
			continue
		}
		if shadow == nil {
			shadow = maps.Clone(items)
		}
		shadow[name] = types.ResourceWithTTL{Resource: &listenerv3.Listener{
			Name: l.GetName(),
			FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
				Name:       wellknown.HTTPConnectionManager,
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: l.GetApiListener().GetApiListener()},
			}}}},
		}}
	}
	if shadow == nil {
		return snap.Consistent()
	}
	check := *snap
	check.Resources[typ] = cachev3.Resources{Version: snap.Resources[typ].Version, Items: shadow}
	return check.Consistent()
}

// GRPCBootstrap renders the xDS bootstrap JSON of a proxyless gRPC client
// (GRPC_XDS_BOOTSTRAP file or GRPC_XDS_BOOTSTRAP_CONFIG value, gRFC A27)
// that reaches the bridge over ADS. gRPC sets node.user_agent_name itself
// ("gRPC Go", ...), which is how the bridge tells it from an Envoy. c.XDS
// entries beyond the first are fallback servers (gRFC A71); AdminPort does
// not apply. The node cluster may be empty: every gRPC client gets the
// same API listeners, and a cluster only matters to place it in a proxy
// group declared proxyless.
func GRPCBootstrap(c BootstrapConfig) ([]byte, error) {
	if c.NodeID == "" {
		return nil, fmt.Errorf("bootstrap needs a node id")
	}
	if len(c.XDS) == 0 && c.XDSUnix == "" {
		return nil, fmt.Errorf("bootstrap needs the bridge's xDS address (-xds HOST:PORT or -xds-unix PATH)")
	}
	type creds struct {
		Type   string         `json:"type"`
		Config map[string]any `json:"config,omitempty"`
	}
	type server struct {
		ServerURI      string   `json:"server_uri"`
		ChannelCreds   []creds  `json:"channel_creds"`
		ServerFeatures []string `json:"server_features"`
	}
	type node struct {
		ID      string `json:"id"`
		Cluster string `json:"cluster,omitempty"`
	}
	cr := creds{Type: "insecure"}
	if c.TLSCAFile != "" {
		cr = creds{Type: "tls", Config: map[string]any{"ca_certificate_file": c.TLSCAFile}}
	}
	var uris []string
	if c.XDSUnix != "" {
		uris = append(uris, "unix://"+c.XDSUnix)
	}
	for _, addr := range c.XDS {
		_, portStr, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("xds address %q: %w (want HOST:PORT)", addr, err)
		}
		if port, err := strconv.ParseUint(portStr, 10, 16); err != nil || port == 0 {
			return nil, fmt.Errorf("xds address %q: bad port", addr)
		}
		uris = append(uris, addr)
	}
	var servers []server
	for _, u := range uris {
		servers = append(servers, server{ServerURI: u, ChannelCreds: []creds{cr}, ServerFeatures: []string{"xds_v3"}})
	}
	b, err := json.MarshalIndent(struct {
		XDSServers []server `json:"xds_servers"`
		Node       node     `json:"node"`
	}{servers, node{ID: c.NodeID, Cluster: c.Cluster}}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
