package adsclient

import (
	"slices"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
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
	var (
		res map[string]proto.Message
		enc map[string]*anypb.Any
	)
	if typ == ClusterType || typ == ListenerType {
		// Full state: whatever the response does not name is gone.
		res = make(map[string]proto.Message, len(items))
		enc = make(map[string]*anypb.Any, len(items))
		routes := make(map[string][]string, len(items))
		secrets := make(map[string][]string, len(items))
		for _, it := range items {
			if it.msg == nil {
				if m, ok := old.Resources[it.name]; ok {
					res[it.name] = m
					enc[it.name] = old.Encoded[it.name]
					routes[it.name] = c.routesOf[it.name]
					secrets[it.name] = c.secretsOf[typ][it.name]
				}
				continue
			}
			res[it.name] = it.msg
			enc[it.name] = it.body
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
		res, enc = cloneMap(old.Resources), cloneMap(old.Encoded)
		for _, it := range items {
			if sub.names[it.name] && it.msg != nil {
				res[it.name] = it.msg
				enc[it.name] = it.body
			}
		}
	}
	types := cloneMap(c.state.Types)
	types[typ] = TypeState{Version: ri.Version, Nonce: ri.Nonce, Resources: res, Encoded: enc}
	c.followLocked(typ, types)
	sub.version = ri.Version
	c.recordLocked(ri)
	u := c.publishLocked(State{Types: types}, typ, ri.Version, ri.Nonce, at)
	c.mu.Unlock()
	c.applyThenACK(u, items, func() proto.Message { return c.sotwRequestLocked(typ, nil) })
}

// applyThenACK hands an accepted response to OnUpdate, then queues its
// ACK (built under the lock) and moves warming on (items: what the
// response brought), in the order they had. Envoy applies a response
// (onConfigUpdate) before it queues the ACK. It also lets an OnUpdate
// that only hands the update on (the agent's relay) wake its worker
// before the writer: Go runs the goroutine woken last first, so the ACK
// leaves before the work the update started, not behind it.
func (c *Client) applyThenACK(u Update, items []item, ack func() proto.Message) {
	if c.cfg.OnUpdate != nil {
		c.cfg.OnUpdate(u)
	}
	c.mu.Lock()
	c.enqueueLocked(u.TypeURL, ack())
	c.warmLocked(u.TypeURL, items, false)
	c.mu.Unlock()
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
	enc := cloneMap(old.Encoded)
	for _, it := range items {
		if !sub.wildcard && !sub.names[it.name] {
			continue
		}
		vers[it.name] = it.version
		if it.msg == nil {
			continue
		}
		res[it.name] = it.msg
		enc[it.name] = it.body
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
		delete(enc, name)
		if typ == ListenerType {
			delete(c.routesOf, name)
		}
		if so := c.secretsOf[typ]; so != nil {
			delete(so, name)
		}
	}
	types := cloneMap(c.state.Types)
	types[typ] = TypeState{Version: ri.Version, Nonce: ri.Nonce, Resources: res, ResourceVersions: vers, Encoded: enc}
	c.followLocked(typ, types)
	c.recordLocked(ri)
	for _, name := range resp.GetRemovedResources() {
		items = append(items, item{name: name})
	}
	u := c.publishLocked(State{Types: types}, typ, ri.Version, ri.Nonce, at)
	c.mu.Unlock()
	c.applyThenACK(u, items, func() proto.Message {
		return &discoveryv3.DeltaDiscoveryRequest{Node: c.node, TypeUrl: typ, ResponseNonce: ri.Nonce}
	})
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
		ts.Encoded = cloneMap(ts.Encoded)
		for _, n := range removed {
			delete(ts.Resources, n)
			delete(ts.ResourceVersions, n)
			delete(ts.Encoded, n)
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
