package adsclient

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

const (
	resourceWrapperType = "type.googleapis.com/envoy.service.discovery.v3.Resource"
	hcmType             = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	upstreamTLSType     = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
	downstreamTLSType   = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
)

// item is one resource of a response after decoding.
type item struct {
	name    string
	version string        // Delta per-resource version
	msg     proto.Message // nil for a TTL heartbeat: keep what we have
	body    *anypb.Any
	routes  []string // RDS names, for listeners
	secrets []string // SDS names, for clusters and listeners
}

// warmSecret prefixes the SDS names in Client.warming.
const warmSecret = "sds:"

// start sends the first request of a type. Names are sent only for
// non-wildcard types: an empty list is Envoy's (legacy) wildcard request in
// both protocol variants.
func (c *Client) start(typeURL string) {
	sub := c.subs[typeURL]
	sub.started = true
	if c.cfg.Mode == Delta {
		c.enqueueLocked(typeURL, &discoveryv3.DeltaDiscoveryRequest{
			Node:                   c.node,
			TypeUrl:                typeURL,
			ResourceNamesSubscribe: sortedKeys(sub.names),
		})
		return
	}
	c.enqueueLocked(typeURL, c.sotwRequestLocked(typeURL, nil))
}

// startLDS runs once, when cluster warming is over or the initial fetch
// timeout passed, whichever is first.
func (c *Client) startLDS() {
	if c.ldsStarted {
		return
	}
	c.ldsStarted = true
	c.warming = map[string]bool{}
	if !c.cfg.NoListeners {
		c.start(ListenerType)
	}
}

// sotwRequestLocked builds a SotW request the way Envoy keeps it per type:
// the full current name list, the last ACKed version and the last nonce
// seen, so a NACK differs from an ACK only by error_detail and the version
// it carries being the previous one.
func (c *Client) sotwRequestLocked(typeURL string, detail *rpcstatus.Status) *discoveryv3.DiscoveryRequest {
	sub := c.subs[typeURL]
	var names []string
	if !sub.wildcard {
		names = sortedKeys(sub.names)
	}
	return &discoveryv3.DiscoveryRequest{
		VersionInfo:   sub.version,
		Node:          c.node,
		ResourceNames: names,
		TypeUrl:       typeURL,
		ResponseNonce: sub.nonce,
		ErrorDetail:   detail,
	}
}

// errorDetail uses INTERNAL because that is the code Envoy puts in its NACKs.
func errorDetail(err error) *rpcstatus.Status {
	return &rpcstatus.Status{Code: int32(codes.Internal), Message: err.Error()}
}

func (c *Client) handleSotW(resp *discoveryv3.DiscoveryResponse, at time.Time) {
	typ := resp.GetTypeUrl()
	ri := ResponseInfo{
		TypeURL:   typ,
		Version:   resp.GetVersionInfo(),
		Nonce:     resp.GetNonce(),
		Resources: len(resp.GetResources()),
		Received:  at,
	}
	sub := c.subs[typ] // the map itself never changes after Dial
	if sub == nil {
		c.ignore(ri)
		return
	}
	items, err := decodeSotW(typ, resp.GetResources())
	if err == nil && c.cfg.NACK != nil {
		err = c.cfg.NACK(typ, ri.Version, bodies(items))
	}

	c.mu.Lock()
	if !sub.started {
		c.mu.Unlock()
		c.ignore(ri)
		return
	}
	sub.nonce = ri.Nonce
	if err != nil {
		ri.NACK = err.Error()
		c.recordLocked(ri)
		c.enqueueLocked(typ, c.sotwRequestLocked(typ, errorDetail(err)))
		c.warmLocked(typ, nil, true)
		c.mu.Unlock()
		return
	}

	old := c.state.Types[typ]
	var res map[string]proto.Message
	if typ == ClusterType || typ == ListenerType {
		// Full state: whatever the response does not name is gone.
		res = make(map[string]proto.Message, len(items))
		routes := make(map[string][]string, len(items))
		secrets := make(map[string][]string, len(items))
		for _, it := range items {
			if it.msg == nil {
				if m, ok := old.Resources[it.name]; ok {
					res[it.name] = m
					routes[it.name] = c.routesOf[it.name]
					secrets[it.name] = c.secretsOf[typ][it.name]
				}
				continue
			}
			res[it.name] = it.msg
			routes[it.name] = it.routes
			secrets[it.name] = it.secrets
		}
		if typ == ListenerType {
			c.routesOf = routes
		}
		c.secretsOf[typ] = secrets
	} else {
		// EDS and RDS responses may carry a subset: like Envoy, only the
		// names present are updated, and names nobody subscribed are dropped.
		res = cloneMap(old.Resources)
		for _, it := range items {
			if sub.names[it.name] && it.msg != nil {
				res[it.name] = it.msg
			}
		}
	}
	types := cloneMap(c.state.Types)
	types[typ] = TypeState{Version: ri.Version, Nonce: ri.Nonce, Resources: res}
	c.followLocked(typ, types)
	sub.version = ri.Version
	c.enqueueLocked(typ, c.sotwRequestLocked(typ, nil))
	c.recordLocked(ri)
	c.warmLocked(typ, items, false)
	u := c.publishLocked(State{Types: types}, typ, ri.Version, ri.Nonce, at)
	c.mu.Unlock()
	if c.cfg.OnUpdate != nil {
		c.cfg.OnUpdate(u)
	}
}

func (c *Client) handleDelta(resp *discoveryv3.DeltaDiscoveryResponse, at time.Time) {
	typ := resp.GetTypeUrl()
	ri := ResponseInfo{
		TypeURL:   typ,
		Version:   resp.GetSystemVersionInfo(),
		Nonce:     resp.GetNonce(),
		Resources: len(resp.GetResources()),
		Removed:   len(resp.GetRemovedResources()),
		Received:  at,
	}
	sub := c.subs[typ]
	if sub == nil {
		c.ignore(ri)
		return
	}
	items, err := decodeDelta(typ, resp.GetResources())
	if err == nil && c.cfg.NACK != nil {
		err = c.cfg.NACK(typ, ri.Version, bodies(items))
	}

	c.mu.Lock()
	if !sub.started {
		c.mu.Unlock()
		c.ignore(ri)
		return
	}
	sub.nonce = ri.Nonce
	if err != nil {
		ri.NACK = err.Error()
		c.recordLocked(ri)
		c.enqueueLocked(typ, &discoveryv3.DeltaDiscoveryRequest{
			Node:          c.node,
			TypeUrl:       typ,
			ResponseNonce: ri.Nonce,
			ErrorDetail:   errorDetail(err),
		})
		c.warmLocked(typ, nil, true)
		c.mu.Unlock()
		return
	}

	old := c.state.Types[typ]
	res := cloneMap(old.Resources)
	vers := cloneMap(old.ResourceVersions)
	for _, it := range items {
		if !sub.wildcard && !sub.names[it.name] {
			continue
		}
		vers[it.name] = it.version
		if it.msg == nil {
			continue
		}
		res[it.name] = it.msg
		if typ == ListenerType {
			c.routesOf[it.name] = it.routes
		}
		if so := c.secretsOf[typ]; so != nil {
			so[it.name] = it.secrets
		}
	}
	for _, name := range resp.GetRemovedResources() {
		delete(res, name)
		delete(vers, name)
		if typ == ListenerType {
			delete(c.routesOf, name)
		}
		if so := c.secretsOf[typ]; so != nil {
			delete(so, name)
		}
	}
	types := cloneMap(c.state.Types)
	types[typ] = TypeState{Version: ri.Version, Nonce: ri.Nonce, Resources: res, ResourceVersions: vers}
	c.followLocked(typ, types)
	c.enqueueLocked(typ, &discoveryv3.DeltaDiscoveryRequest{
		Node:          c.node,
		TypeUrl:       typ,
		ResponseNonce: ri.Nonce,
	})
	c.recordLocked(ri)
	for _, name := range resp.GetRemovedResources() {
		items = append(items, item{name: name})
	}
	c.warmLocked(typ, items, false)
	u := c.publishLocked(State{Types: types}, typ, ri.Version, ri.Nonce, at)
	c.mu.Unlock()
	if c.cfg.OnUpdate != nil {
		c.cfg.OnUpdate(u)
	}
}

// ignore records a response for a type nobody asked for. Envoy drops those
// without a reply, so no request is sent.
func (c *Client) ignore(ri ResponseInfo) {
	ri.Ignored = true
	c.mu.Lock()
	c.recordLocked(ri)
	c.mu.Unlock()
}

// followLocked keeps EDS in step with the clusters and RDS with the
// listeners. It runs before the CDS/LDS ACK is queued, which is the order
// Envoy puts them on the wire.
func (c *Client) followLocked(typeURL string, types map[string]TypeState) {
	switch typeURL {
	case ClusterType:
		want := map[string]bool{}
		for _, m := range types[ClusterType].Resources {
			if name, ok := edsName(m.(*clusterv3.Cluster)); ok {
				want[name] = true
			}
		}
		c.resubscribeLocked(EndpointType, want, types)
		if !c.ldsStarted {
			// A cluster with TLS warms once its secrets are there.
			for _, names := range c.secretsOf[ClusterType] {
				for _, n := range names {
					if _, held := types[SecretType].Resources[n]; !held {
						c.warming[warmSecret+n] = true
					}
				}
			}
		}
		c.followSecretsLocked(types)
	case ListenerType:
		want := map[string]bool{}
		for _, names := range c.routesOf {
			for _, n := range names {
				want[n] = true
			}
		}
		c.resubscribeLocked(RouteType, want, types)
		c.followSecretsLocked(types)
	}
}

// followSecretsLocked subscribes to the secrets clusters and listeners
// name, as Envoy's SDS subscriptions follow the transport sockets that
// use them.
func (c *Client) followSecretsLocked(types map[string]TypeState) {
	want := map[string]bool{}
	for _, byName := range c.secretsOf {
		for _, names := range byName {
			for _, n := range names {
				want[n] = true
			}
		}
	}
	c.resubscribeLocked(SecretType, want, types)
}

// resubscribeLocked changes the names of a non-wildcard type, drops the
// state of names no longer wanted and tells the server.
func (c *Client) resubscribeLocked(typeURL string, want map[string]bool, types map[string]TypeState) {
	sub := c.subs[typeURL]
	var added, removed []string
	for n := range want {
		if !sub.names[n] {
			added = append(added, n)
		}
	}
	for n := range sub.names {
		if !want[n] {
			removed = append(removed, n)
		}
	}
	if len(added) == 0 && len(removed) == 0 {
		return
	}
	slices.Sort(added)
	slices.Sort(removed)
	sub.names = want
	if typeURL == EndpointType && !c.ldsStarted {
		for _, n := range added {
			c.warming[n] = true
		}
		for _, n := range removed {
			delete(c.warming, n)
		}
	}
	if typeURL == SecretType {
		for _, n := range removed {
			delete(c.warming, warmSecret+n)
		}
	}
	if ts, ok := types[typeURL]; ok && len(removed) > 0 {
		ts.Resources = cloneMap(ts.Resources)
		if ts.ResourceVersions != nil {
			ts.ResourceVersions = cloneMap(ts.ResourceVersions)
		}
		for _, n := range removed {
			delete(ts.Resources, n)
			delete(ts.ResourceVersions, n)
		}
		types[typeURL] = ts
	}
	if !sub.started {
		// An empty first request would be a wildcard subscription.
		if len(want) > 0 {
			c.start(typeURL)
		}
		return
	}
	if c.cfg.Mode == Delta {
		c.enqueueLocked(typeURL, &discoveryv3.DeltaDiscoveryRequest{
			Node:                     c.node,
			TypeUrl:                  typeURL,
			ResourceNamesSubscribe:   added,
			ResourceNamesUnsubscribe: removed,
		})
		return
	}
	// Even an empty list is sent: Envoy does so when its last EDS cluster
	// goes away, and the server must not read it as wildcard any more.
	c.enqueueLocked(typeURL, c.sotwRequestLocked(typeURL, nil))
}

// warmLocked tracks Envoy's initialisation order: LDS is requested only
// after the first CDS response and a response (good or bad) for every EDS
// cluster it brought.
func (c *Client) warmLocked(typeURL string, items []item, nacked bool) {
	if c.ldsStarted {
		return
	}
	switch typeURL {
	case ClusterType:
		c.cdsSeen = true
	case EndpointType:
		if nacked {
			// Envoy ends the warming of every EDS cluster on a rejected update.
			for n := range c.warming {
				if !strings.HasPrefix(n, warmSecret) {
					delete(c.warming, n)
				}
			}
		}
		for _, it := range items {
			delete(c.warming, it.name)
		}
	case SecretType:
		if nacked {
			// A rejected secret fails the warming of its clusters.
			for n := range c.warming {
				if strings.HasPrefix(n, warmSecret) {
					delete(c.warming, n)
				}
			}
		}
		for _, it := range items {
			delete(c.warming, warmSecret+it.name)
		}
	}
	if c.cdsSeen && len(c.warming) == 0 {
		c.startLDS()
	}
}

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
