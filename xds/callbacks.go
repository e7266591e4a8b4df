package xds

import (
	"context"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/rs/zerolog"
)

// callbacks logs the life of every stream: who connected, what they ACKed,
// and every NACK with Envoy's error text, which is what an operator needs
// to see first when a proxy is stuck.
type callbacks struct {
	log zerolog.Logger
	// sawNode is told every node.cluster that sends a request.
	sawNode func(nodeCluster string)

	mu    sync.Mutex
	nodes map[streamKey]*corev3.Node // from each stream's first request
}

// streamKey identifies a stream: go-control-plane numbers SotW and delta
// streams independently, so an id alone is ambiguous.
type streamKey struct {
	delta bool
	id    int64
}

var _ serverv3.Callbacks = (*callbacks)(nil)

func newCallbacks(log zerolog.Logger, sawNode func(string)) *callbacks {
	return &callbacks{log: log, sawNode: sawNode, nodes: map[streamKey]*corev3.Node{}}
}

// node remembers the node of a stream: Envoy sends it only on the first
// request of a stream.
func (c *callbacks) node(id streamKey, n *corev3.Node) *corev3.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n != nil && c.nodes[id] == nil {
		c.nodes[id] = n
	}
	return c.nodes[id]
}

func (c *callbacks) forget(id streamKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nodes, id)
}

func (c *callbacks) request(stream streamKey, n *corev3.Node, typeURL, version, nonce string, errDetail string) {
	node := c.node(stream, n)
	if c.sawNode != nil && node != nil {
		c.sawNode(node.GetCluster())
	}
	switch {
	case errDetail != "":
		c.log.Warn().Int64("stream", stream.id).Bool("delta", stream.delta).Str("node", node.GetId()).Str("group", node.GetCluster()).
			Str("type", typeURL).Str("version", version).Str("nonce", nonce).Str("error", errDetail).
			Msg("proxy rejected config (NACK)")
	case nonce != "":
		c.log.Debug().Int64("stream", stream.id).Bool("delta", stream.delta).Str("node", node.GetId()).Str("type", typeURL).
			Str("version", version).Msg("proxy acknowledged config")
	}
}

func (c *callbacks) OnStreamOpen(_ context.Context, id int64, typeURL string) error {
	c.log.Debug().Int64("stream", id).Str("type", typeURL).Msg("stream opened")
	return nil
}

func (c *callbacks) OnStreamClosed(id int64, n *corev3.Node) {
	c.log.Debug().Int64("stream", id).Str("node", n.GetId()).Msg("stream closed")
	c.forget(streamKey{id: id})
}

func (c *callbacks) OnStreamRequest(id int64, r *discoveryv3.DiscoveryRequest) error {
	c.request(streamKey{id: id}, r.GetNode(), r.GetTypeUrl(), r.GetVersionInfo(), r.GetResponseNonce(), r.GetErrorDetail().GetMessage())
	return nil
}

func (c *callbacks) OnStreamResponse(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
	c.log.Debug().Int64("stream", id).Str("node", c.node(streamKey{id: id}, nil).GetId()).Str("type", resp.GetTypeUrl()).
		Str("version", resp.GetVersionInfo()).Int("resources", len(resp.GetResources())).Msg("pushed config")
}

func (c *callbacks) OnDeltaStreamOpen(_ context.Context, id int64, typeURL string) error {
	c.log.Debug().Int64("stream", id).Str("type", typeURL).Msg("delta stream opened")
	return nil
}

func (c *callbacks) OnDeltaStreamClosed(id int64, n *corev3.Node) {
	c.log.Debug().Int64("stream", id).Str("node", n.GetId()).Msg("delta stream closed")
	c.forget(streamKey{delta: true, id: id})
}

func (c *callbacks) OnStreamDeltaRequest(id int64, r *discoveryv3.DeltaDiscoveryRequest) error {
	c.request(streamKey{delta: true, id: id}, r.GetNode(), r.GetTypeUrl(), "", r.GetResponseNonce(), r.GetErrorDetail().GetMessage())
	return nil
}

func (c *callbacks) OnStreamDeltaResponse(id int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
	c.log.Debug().Int64("stream", id).Str("node", c.node(streamKey{delta: true, id: id}, nil).GetId()).Str("type", resp.GetTypeUrl()).
		Int("resources", len(resp.GetResources())).Int("removed", len(resp.GetRemovedResources())).Msg("pushed delta config")
}

func (c *callbacks) OnFetchRequest(context.Context, *discoveryv3.DiscoveryRequest) error { return nil }

func (c *callbacks) OnFetchResponse(*discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse) {}
