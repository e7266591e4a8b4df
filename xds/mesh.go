package xds

import (
	"fmt"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Sidecar groups (Consul Connect): the group's listeners are its policy
// listeners (if any) and the sidecar's, which ir derives from the
// registration (ir.Sidecar.Listeners). Upstream listeners are ordinary
// listeners; the public one terminates mutual TLS and enforces the
// intentions, like the public listener of Consul's own sidecars.

// meshRole is what a sidecar adds to one of its listeners; the zero value
// is a policy listener's.
type meshRole struct {
	direction corev3.TrafficDirection
	// intentions and protocol are the public listener's: its RBAC, and
	// the destination's protocol (gRPC gets no client-certificate header,
	// as in Consul).
	intentions *ir.Intentions
	protocol   string
}

// sidecarAware lists what a group's listeners are translated from:
// its own and its sidecar's, each with its role, sorted by name like
// every slice of Resources.
func sidecarAware(g *ir.Group) ([]ir.Listener, []meshRole) {
	roles := make([]meshRole, len(g.Listeners))
	if g.Sidecar == nil {
		return g.Listeners, roles
	}
	s := g.Sidecar
	ls := slices.Concat(g.Listeners, s.Listeners(g.Name))
	roles = append(roles, meshRole{direction: corev3.TrafficDirection_INBOUND, intentions: &s.Intentions, protocol: s.Protocol})
	for i := range s.Upstreams {
		if !s.Upstreams[i].Implicit() { // implicit ones are chains of the outbound listener (tproxy.go)
			roles = append(roles, meshRole{direction: corev3.TrafficDirection_OUTBOUND})
		}
	}
	order := make([]int, len(ls))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(ls[a].Name, ls[b].Name) })
	sortedLs, sortedRoles := make([]ir.Listener, len(ls)), make([]meshRole, len(ls))
	for i, j := range order {
		sortedLs[i], sortedRoles[i] = ls[j], roles[j]
	}
	return sortedLs, sortedRoles
}

// buildGroupListener builds a listener of a group in its role.
func buildGroupListener(l *ir.Listener, role *meshRole, rbacs rbacMemo) (*listenerv3.Listener, error) {
	if role.intentions != nil {
		return buildPublicListener(l, role, rbacs)
	}
	out := buildListener(l)
	out.TrafficDirection = role.direction
	return out, nil
}

// buildPublicListener is a sidecar's public listener: one filter chain
// that requires a client certificate chaining to the Connect roots,
// then RBAC (network RBAC before tcp_proxy, or HTTP RBAC first in the
// HTTP filters: one or the other, as Consul does), then the local
// application.
func buildPublicListener(l *ir.Listener, role *meshRole, rbacs rbacMemo) (*listenerv3.Listener, error) {
	var filters []*listenerv3.Filter
	if l.Protocol == "tcp" {
		rbac, err := rbacs.network(*role.intentions)
		if err != nil {
			return nil, fmt.Errorf("listener %q: %w", l.Name, err)
		}
		filters = []*listenerv3.Filter{
			{Name: wellknown.RoleBasedAccessControl, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: rbac}},
			tcpProxyFilter(l),
		}
	} else {
		rbac, err := rbacs.httpFilter(*role.intentions)
		if err != nil {
			return nil, fmt.Errorf("listener %q: %w", l.Name, err)
		}
		hcm := buildHCM(l)
		hcm.HttpFilters = append([]*hcmv3.HttpFilter{rbac}, hcm.HttpFilters...)
		if role.protocol != "grpc" {
			// Tell the application who called (x-forwarded-client-cert),
			// as Consul's sidecars do; gRPC metadata has no use for it.
			hcm.ForwardClientCertDetails = hcmv3.HttpConnectionManager_APPEND_FORWARD
			hcm.SetCurrentClientCertDetails = &hcmv3.HttpConnectionManager_SetCurrentClientCertDetails{
				Subject: wrapperspb.Bool(true), Cert: true, Chain: true, Dns: true, Uri: true,
			}
		}
		filters = []*listenerv3.Filter{{Name: wellknown.HTTPConnectionManager, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)}}}
	}
	if l.TLS == nil || l.TLS.ClientCASecret == "" {
		// ir.Sidecar.Listeners always sets both; without a client CA the
		// RBAC would see no principal and the listener would be open.
		return nil, fmt.Errorf("listener %q: public listener without client certificate verification: %w", l.Name, ErrUnsupported)
	}
	return &listenerv3.Listener{
		Name:             l.Name,
		Address:          socketAddress(l.Address, l.Port),
		TrafficDirection: role.direction,
		FilterChains: []*listenerv3.FilterChain{{
			Name:            "public",
			Filters:         filters,
			TransportSocket: downstreamTLS(l.TLS, l.TLS.DefaultCertificate),
		}},
	}, nil
}

// meshSecretsServed checks, for a central mesh, that the mesh secrets
// the group's clusters name (the caller's leaf, the roots) are among the
// group's secrets: shared secrets never hold them (a leaf's key belongs
// to its service's sidecars only), and without them Envoy waits for the
// cluster forever.
func meshSecretsServed(g *ir.Group, r *Resources, clusters map[string]memoCluster, ref func(types.Resource) references) error {
	var cs []*clusterv3.Cluster
	for _, n := range g.Clusters {
		if mc, ok := clusters[n]; ok {
			cs = append(cs, mc.cluster)
		}
	}
	// The group's own secrets only, and only mesh ones: every other
	// secret a cluster names is shared, checked with the shared clusters.
	notMesh := func(s string) bool { return !ir.IsMeshSecret(s) }
	if err := secretsServed(nil, r.Secrets, cs, ref, notMesh); err != nil {
		return fmt.Errorf("%w: the group's mesh secrets: %w", ErrInconsistent, err)
	}
	return nil
}
