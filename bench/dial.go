package bench

// Opening a simulated proxy's stream: through grpc-go's client, or over
// the proxy's own HTTP/2 connection (h2stream.go).

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// msgStream is what a client reads and writes: grpc-go's stream or its
// own HTTP/2 one (h2stream.go).
type msgStream interface {
	SendMsg(m any) error
	RecvMsg(m any) error
}

// countingCodec is the proto codec that remembers the size of the last
// message it decoded for its client (one codec per connection).
type countingCodec struct {
	encoding.CodecV2
	c *Client
}

func (cc countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	cc.c.lastSize = data.Len()
	return cc.CodecV2.Unmarshal(data, v)
}

func (cc countingCodec) Name() string { return "proto" }

func (f *Fleet) dial(ctx context.Context, k int) (*Client, error) {
	mode := SotW
	if f.cfg.Mode != nil {
		mode = f.cfg.Mode(k)
	}
	c := &Client{
		f: f, idx: k, nodeID: f.cfg.NodeID(k), mode: mode,
		narrow: f.cfg.Narrow != nil && f.cfg.Narrow(k),
		done:   make(chan struct{}),
	}
	if !f.cfg.H2 {
		c.sendq = make(chan proto.Message, 64) // writeLoop's
	}
	if f.cfg.EnvoyNode {
		c.setEnvoyNode(c.nodeID, f.cfg.clusterOf(k))
	}
	c.node = &corev3.Node{
		Id: c.nodeID, Cluster: f.cfg.clusterOf(k), UserAgentName: "envoy",
		// Consul checks the Envoy version; 1.25 is the newest 1.15 supports.
		UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{
			Version: &typev3.SemanticVersion{MajorNumber: 1, MinorNumber: 25, Patch: 4},
		}},
		Metadata:       &structpb.Struct{Fields: map[string]*structpb.Value{}},
		ClientFeatures: []string{"envoy.lb.does_not_support_overprovisioning", "envoy.lrs.supports_send_all_clusters"},
	}
	open := c.dialGRPC
	if f.cfg.H2 {
		open = c.dialH2
	}
	if err := open(ctx); err != nil {
		return nil, err
	}
	c.subscribe(CDS, nil, nil, nil)
	if c.h2 == nil { // the HTTP/2 stream writes from the reader (send)
		c.wg.Add(1)
		go c.writeLoop()
	}
	c.wg.Add(1)
	go c.readLoop()
	return c, nil
}

// adsMethods are the two ADS methods' paths, for the HTTP/2 stream.
var adsMethods = map[Mode]string{
	Delta: "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources",
	SotW:  "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
}

func (c *Client) dialH2(ctx context.Context) error {
	if c.f.cfg.StreamsPerConn > 1 {
		return errors.New("the HTTP/2 client opens one stream per connection, as Envoy; it cannot share connections (streams-per-conn)")
	}
	c.cancel = func() {} // Close closes the connection
	c.dialedAt = time.Now()
	octx, ocancel := context.WithTimeout(ctx, 60*time.Second)
	defer ocancel()
	s, err := dialH2(octx, c.f.cfg.addrOf(c.idx), adsMethods[c.mode], func(n int) { c.lastSize = n })
	if err != nil {
		return fmt.Errorf("client %s: %w", c.nodeID, err)
	}
	c.stream, c.h2 = s, s
	return nil
}

func (c *Client) dialGRPC(ctx context.Context) error {
	k := c.idx
	f := c.f
	mode := c.mode
	conn, err := f.connFor(k, f.cfg.addrOf(k))
	if err != nil {
		return err
	}
	c.conn = conn
	sctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	c.dialedAt = time.Now()
	octx, ocancel := context.WithTimeout(ctx, 60*time.Second)
	stop := context.AfterFunc(octx, cancel)
	// The codec is per stream: it counts this client's bytes, and
	// clients may share a connection.
	codec := grpc.ForceCodecV2(countingCodec{CodecV2: encoding.GetCodecV2("proto"), c: c})
	// Wait for the connection as Envoy does (it retries with backoff): in a
	// reconnect storm of 10,000 connections some first dials fail, and a
	// failed dial must not fail the stream.
	ready := grpc.WaitForReady(true)
	if mode == Delta {
		c.stream, err = ads.DeltaAggregatedResources(sctx, codec, ready)
	} else {
		c.stream, err = ads.StreamAggregatedResources(sctx, codec, ready)
	}
	stop()
	ocancel()
	if err != nil {
		cancel()
		c.closeConn()
		return fmt.Errorf("client %s: open stream: %w", c.nodeID, err)
	}
	return nil
}
