package xds

import (
	"errors"
	"fmt"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

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
		r.addRouteSources(l)
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
		HttpFilters: httpFilters(l, true),
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
			case !r.HTTP.IsZero() || !vh.HTTP.IsZero():
				bad(r, "HTTP filter settings (cors, rate_limit, upgrades, compression)")
			}
		}
	}
	return errors.Join(errs...)
}
