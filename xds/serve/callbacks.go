package serve

import (
	"context"
	"math"
	"net"
	"sync"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// callbacks follow the life of every stream: who connected, what was
// pushed, what they ACKed, and every NACK with the proxy's error text,
// which is what an operator needs to see first when a proxy is stuck. The
// protocol state goes to the tracker (/v1/proxies), counts to metrics.
type callbacks struct {
	log     zerolog.Logger
	tracker *tracker
	metrics *metrics
	// joined is told the snapshot key of every stream when its node is
	// first known, left when such a stream has gone.
	joined, left func(key string)
	// answered, if set, is told the key of every stream that ACKed or
	// NACKed a response (make-before-break waits for those).
	answered func(key string)
	// oldEnvoy, if set, is told every stream's node when it is first
	// known, after joined (the server warns about old Envoys).
	oldEnvoy func(*corev3.Node)
	// allow, if set, vets a stream's node when it is first known.
	allow     func(*corev3.Node) error
	admission *admission
	// history, if set, records pushes, ACKs and NACKs per node.
	history *history
	// contexts holds, by stream, the context of streams not admitted yet
	// (admit deletes it).
	contexts sync.Map
}

// streamKey identifies a stream: the SotW and delta servers number their
// streams independently, so an id alone is ambiguous.
type streamKey struct {
	delta bool
	id    int64
}

var _ serverv3.Callbacks = (*callbacks)(nil)

func newCallbacks(log zerolog.Logger, t *tracker, m *metrics, joined, left func(string), a *admission) *callbacks {
	return &callbacks{log: log, tracker: t, metrics: m, joined: joined, left: left, admission: a}
}

// open registers a stream. Its initial-sync slot is taken at its first
// request (admit), so streams that open and send nothing hold none.
func (c *callbacks) open(ctx context.Context, key streamKey, typeURL string) error {
	var remote net.Addr
	if p, ok := peer.FromContext(ctx); ok {
		remote = p.Addr
	}
	c.contexts.Store(key, ctx)
	c.tracker.open(key, typeURL, remote)
	c.log.Debug().Stringer("stream", key).Str("kind", streamKind(key.delta, typeURL)).Stringer("remote", remote).Msg("stream opened")
	return nil
}

// admit waits for key's initial-sync slot before its first request is
// served; later requests pass at once. An error ends the stream.
func (c *callbacks) admit(key streamKey) error {
	ctx, ok := c.contexts.LoadAndDelete(key)
	if !ok {
		return nil // admitted already
	}
	if err := c.admission.admit(ctx.(context.Context), key); err != nil {
		c.log.Debug().Stringer("stream", key).Msg("stream ended while waiting for an initial-sync slot")
		return err
	}
	return nil
}

func (c *callbacks) closed(key streamKey) {
	c.contexts.Delete(key)
	c.admission.release(key)
	st := c.tracker.close(key)
	if st == nil || st.node == nil {
		c.log.Debug().Stringer("stream", key).Msg("stream closed before any request")
		return
	}
	c.metrics.streamCounted(st.node.GetCluster(), st.kind, -1)
	if !c.tracker.hasNode(st.node.GetId()) {
		c.history.forget(st.node.GetId())
	}
	if c.left != nil {
		c.left(cache.Key(st.node))
	}
	c.log.Info().Stringer("stream", key).Str("kind", st.kind).Str("node", st.node.GetId()).Str("group", st.node.GetCluster()).
		Dur("connected_for", time.Since(st.openedAt)).Msg("proxy disconnected")
}

func (c *callbacks) request(key streamKey, n *corev3.Node, typeURL, version, nonce, errDetail string, names nameUpdate) error {
	if err := c.admit(key); err != nil {
		return err
	}
	now := time.Now() // one reading for the tracker and the history
	r := c.tracker.request(now, key, n, typeURL, version, nonce, errDetail, names)
	if r.kind == reqRefused {
		c.metrics.refused.Inc()
		c.log.Warn().Stringer("stream", key).Str("node", truncate(r.node.GetId(), 256)).Str("reason", r.refused).
			Msg("refused xDS request; ending the stream")
		return status.Error(codes.InvalidArgument, r.refused)
	}
	node := r.node
	if r.newNode && c.allow != nil {
		if err := c.allow(node); err != nil {
			c.metrics.refused.Inc()
			c.log.Warn().Stringer("stream", key).Str("node", truncate(node.GetId(), 256)).Str("group", truncate(node.GetCluster(), 256)).
				Err(err).Msg("refused xDS client: node not allowed here")
			c.tracker.dropNode(key) // never joined: nothing to count down on close
			return status.Error(codes.PermissionDenied, err.Error())
		}
	}
	if r.newNode {
		c.metrics.streamCounted(node.GetCluster(), r.kindStr, +1)
		if c.joined != nil {
			c.joined(cache.Key(node))
		}
		c.log.Info().Stringer("stream", key).Str("kind", r.kindStr).Str("node", node.GetId()).Str("group", node.GetCluster()).
			Str("user_agent", userAgent(node)).Msg("proxy connected")
		if c.oldEnvoy != nil {
			c.oldEnvoy(node)
		}
	}
	switch r.kind {
	case reqNACK:
		c.metrics.counted(typeURL).nacks.Inc()
		c.log.Warn().Stringer("stream", key).Str("node", node.GetId()).Str("group", node.GetCluster()).
			Str("type", typeURL).Str("version", r.version).Str("nonce", nonce).Str("error", truncate(errDetail, maxNACKText)).Int("error_bytes", len(errDetail)).
			Msg("proxy rejected config (NACK); it keeps its previous version and gets no resend until the config changes")
	case reqACK:
		c.metrics.counted(typeURL).acks.Inc()
		// Checked first: passing key as a Stringer allocates even when
		// the event is dropped, once per proxy per push.
		if ev := c.log.Debug(); ev.Enabled() {
			ev.Stringer("stream", key).Str("node", node.GetId()).Str("type", typeURL).
				Str("version", r.version).Str("nonce", nonce).Msg("proxy acknowledged config")
		}
	case reqStale:
		if ev := c.log.Debug(); ev.Enabled() {
			ev.Stringer("stream", key).Str("node", node.GetId()).Str("type", typeURL).
				Str("nonce", nonce).Bool("nack", errDetail != "").Msg("ignoring request with a stale nonce")
		}
	}
	if r.kind == reqACK || r.kind == reqNACK {
		ev := event{at: now.UnixNano(), stream: key, kind: eventACK, typ: typeURL, version: r.version}
		if r.kind == reqNACK {
			ev.kind, ev.err = eventNACK, errDetail
		}
		c.history.record(node.GetId(), ev)
		if c.admission.holds(key) && c.tracker.initialSyncDone(key) {
			c.admission.release(key)
		}
		if c.answered != nil {
			c.answered(cache.Key(node))
		}
	}
	return nil
}

func (c *callbacks) response(key streamKey, typeURL, version, nonce string, resources, removed int, names func() []string) {
	now := time.Now() // one reading for the tracker and the history
	node := c.tracker.response(now, key, typeURL, version, nonce, resources, names)
	c.metrics.counted(typeURL).pushes.Inc()
	c.history.record(node.GetId(), event{at: now.UnixNano(), stream: key, kind: eventPush, typ: typeURL, version: version, resources: int32(min(resources, math.MaxInt32))})
	ev := c.log.Debug()
	if ev.Enabled() {
		ev.Stringer("stream", key).Str("node", node.GetId()).Str("type", typeURL).Str("version", version).
			Str("nonce", nonce).Int("resources", resources)
		if key.delta {
			ev.Int("removed", removed)
		}
		ev.Msg("pushed config")
	}
}

func (c *callbacks) OnStreamOpen(ctx context.Context, id int64, typeURL string) error {
	return c.open(ctx, streamKey{id: id}, typeURL)
}

func (c *callbacks) OnStreamClosed(id int64, _ *corev3.Node) {
	c.closed(streamKey{id: id})
}

func (c *callbacks) OnStreamRequest(id int64, r *discoveryv3.DiscoveryRequest) error {
	return c.request(streamKey{id: id}, r.GetNode(), r.GetTypeUrl(), r.GetVersionInfo(), r.GetResponseNonce(), r.GetErrorDetail().GetMessage(),
		nameUpdate{replace: true, add: r.GetResourceNames()})
}

func (c *callbacks) OnStreamResponse(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
	c.response(streamKey{id: id}, resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce(), len(resp.GetResources()), 0, func() []string {
		var names []string
		for _, a := range resp.GetResources() {
			cla := &endpointv3.ClusterLoadAssignment{}
			if a.UnmarshalTo(cla) == nil {
				names = append(names, cla.GetClusterName())
			}
		}
		return names
	})
}

func (c *callbacks) OnDeltaStreamOpen(ctx context.Context, id int64, typeURL string) error {
	return c.open(ctx, streamKey{delta: true, id: id}, typeURL)
}

func (c *callbacks) OnDeltaStreamClosed(id int64, _ *corev3.Node) {
	c.closed(streamKey{delta: true, id: id})
}

// OnStreamDeltaRequest runs before the delta server fills in a missing
// node or type URL (as go-control-plane's did), so both come from the
// tracker and the stream.
func (c *callbacks) OnStreamDeltaRequest(id int64, r *discoveryv3.DeltaDiscoveryRequest) error {
	return c.request(streamKey{delta: true, id: id}, r.GetNode(), c.deltaType(id, r.GetTypeUrl()), "", r.GetResponseNonce(), r.GetErrorDetail().GetMessage(),
		nameUpdate{add: r.GetResourceNamesSubscribe(), remove: r.GetResourceNamesUnsubscribe()})
}

func (c *callbacks) OnStreamDeltaResponse(id int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
	c.response(streamKey{delta: true, id: id}, resp.GetTypeUrl(), resp.GetSystemVersionInfo(), resp.GetNonce(), len(resp.GetResources()), len(resp.GetRemovedResources()), func() []string {
		names := make([]string, len(resp.GetResources()))
		for i, r := range resp.GetResources() {
			names[i] = r.GetName()
		}
		return names
	})
}

// deltaType is the type URL of a delta request: on a per-type stream the
// request may leave it empty.
func (c *callbacks) deltaType(id int64, typeURL string) string {
	if typeURL != "" {
		return typeURL
	}
	return c.tracker.streamType(streamKey{delta: true, id: id})
}

func (c *callbacks) OnFetchRequest(context.Context, *discoveryv3.DiscoveryRequest) error { return nil }

func (c *callbacks) OnFetchResponse(*discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse) {}
