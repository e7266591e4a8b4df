package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/envoynode"
)

// One simulated proxy: its stream, subscriptions, ACKs and what it holds
// (fleet.go holds the fleet and the probes that time an update).

// Client is one lean simulated Envoy: it decodes every resource the way
// Envoy must (full proto unmarshal, HCMs of listeners for RDS names),
// follows EDS/RDS subscriptions, ACKs, and keeps only names and counters —
// a few hundred bytes plus shared name lists per client.
type Client struct {
	f      *Fleet
	idx    int
	nodeID string
	mode   Mode
	narrow bool // in the sidecar group, not the edge group (FleetConfig.Narrow)
	node   *corev3.Node
	// envoyNode is the Envoy node's encoding as the node field of the
	// client's requests (1 in delta, 2 in SotW); nil without
	// FleetConfig.EnvoyNode.
	envoyNode []byte
	conn      *grpc.ClientConn // nil with h2
	stream    msgStream
	h2        *h2Stream // FleetConfig.H2: the stream, which sends inline
	cancel    context.CancelFunc
	sendq     chan proto.Message
	done      chan struct{}
	wg        sync.WaitGroup
	err       atomic.Pointer[error]

	dialedAt   time.Time
	firstResp  atomic.Int64
	syncedAt   atomic.Int64
	pushes     [numTypes]atomic.Int64
	fastPushes atomic.Int64
	lastSize   int

	// held is the version of each type last received, for other
	// goroutines (the replica check: replicas serve identical versions).
	held [numTypes]atomic.Pointer[string]

	// reader-goroutine state
	version [numTypes]string
	nonce   [numTypes]string
	// acks is, per type, the encoding of a SotW ACK without its version
	// and nonce (appendSotwACK), and the names it was made for.
	acks       [numTypes]encodedACK
	got        [numTypes]bool
	started    [numTypes]bool
	need, have [numTypes]int // EDS/RDS: resources still expected since the last subscription change
	edsNames   []string
	rdsNames   []string
	lastPush   [numTypes]time.Time
}

// Close ends the stream and the connection (a shared one stays for the
// fleet to close).
func (c *Client) Close() {
	c.cancel()
	if c.h2 != nil {
		c.h2.Close()
	} else {
		c.closeConn()
	}
	c.wg.Wait()
}

func (c *Client) closeConn() {
	if c.f.cfg.StreamsPerConn <= 1 {
		c.conn.Close()
	}
}

// Err is why the stream ended, nil while it runs or after Close.
func (c *Client) Err() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (c *Client) describe() string {
	return fmt.Sprintf("%s (%s): got CDS=%v EDS=%d/%d LDS=%v RDS=%d/%d, err=%v",
		c.nodeID, c.mode, c.got[CDS], c.have[EDS], c.need[EDS], c.got[LDS], c.have[RDS], c.need[RDS], c.Err())
}

func (c *Client) send(m proto.Message) {
	if c.h2 != nil {
		_ = c.h2.SendMsg(m) // a failed write closes the connection: the reader sees it
		return
	}
	select {
	case c.sendq <- m:
	case <-c.done:
	}
}

func (c *Client) writeLoop() {
	defer c.wg.Done()
	for {
		select {
		case m := <-c.sendq:
			if err := c.stream.SendMsg(m); err != nil {
				return // the reader sees the real status
			}
		case <-c.done:
			return
		}
	}
}

func (c *Client) readLoop() {
	defer c.wg.Done()
	defer close(c.done)
	for {
		var err error
		if c.mode == Delta {
			resp := new(discoveryv3.DeltaDiscoveryResponse)
			if err = c.stream.RecvMsg(resp); err == nil {
				err = c.handleDelta(resp)
			}
		} else {
			resp := new(discoveryv3.DiscoveryResponse)
			if err = c.stream.RecvMsg(resp); err == nil {
				err = c.handleSotW(resp)
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "context canceled") && !strings.Contains(err.Error(), "Canceled") {
				c.err.Store(&err)
			}
			return
		}
	}
}

// subscribe sends the first request of a type, or a change of names.
// names is the full new list (SotW); added/removed the delta.
func (c *Client) subscribe(t Type, names, added, removed []string) {
	first := !c.started[t]
	c.started[t] = true
	if c.mode == Delta {
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURLs[t], ResourceNamesSubscribe: added, ResourceNamesUnsubscribe: removed}
		if first {
			req.Node = c.node
		}
		c.send(c.withNode(req))
		return
	}
	c.send(c.withNode(&discoveryv3.DiscoveryRequest{
		Node: c.node, TypeUrl: typeURLs[t], ResourceNames: names,
		VersionInfo: c.version[t], ResponseNonce: c.nonce[t],
	}))
}

// envoyNodeRest is an Envoy node's encoding without its id and cluster:
// the same for every client, so encoded once per process rather than
// 24 KiB per client.
var envoyNodeRest = sync.OnceValue(func() []byte {
	b, err := proto.Marshal(envoynode.New("", ""))
	if err != nil {
		panic(err) // a node built in code always encodes
	}
	return b
})

// setEnvoyNode makes the client send an Envoy build's node with id and
// cluster with every request (FleetConfig.EnvoyNode). Fields 1 and 2
// followed by the rest are the whole node's encoding.
func (c *Client) setEnvoyNode(id, cluster string) {
	b, err := proto.Marshal(&corev3.Node{Id: id, Cluster: cluster})
	if err != nil {
		panic(err)
	}
	b = append(b, envoyNodeRest()...)
	num := protowire.Number(2) // SotW's DiscoveryRequest.node
	if c.mode == Delta {
		num = 1 // DeltaDiscoveryRequest.node
	}
	c.envoyNode = protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
}

// withNode puts the Envoy node on m when the client has one: as the
// encoded field itself (an unknown field to the message, encoded as is),
// so the load generator does not encode 24 KiB per request.
func (c *Client) withNode(m proto.Message) proto.Message {
	if c.envoyNode == nil {
		return m
	}
	switch r := m.(type) {
	case *discoveryv3.DeltaDiscoveryRequest:
		r.Node = nil
	case *discoveryv3.DiscoveryRequest:
		r.Node = nil
	}
	m.ProtoReflect().SetUnknown(c.envoyNode)
	return m
}

func (c *Client) ack(t Type) {
	if c.mode == Delta {
		c.send(c.withNode(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURLs[t], ResponseNonce: c.nonce[t]}))
		return
	}
	var names []string
	switch t {
	case EDS:
		names = c.edsNames
	case RDS:
		names = c.rdsNames
	}
	if c.h2 != nil {
		// As send: a failed write closes the connection for the reader.
		_ = c.h2.SendEncoded(func(out []byte) []byte { return c.appendSotwACK(out, t, names) })
		return
	}
	c.send(c.withNode(&discoveryv3.DiscoveryRequest{
		Node: c.node, TypeUrl: typeURLs[t], ResourceNames: names,
		VersionInfo: c.version[t], ResponseNonce: c.nonce[t],
	}))
}

// encodedACK is a SotW ACK's names and type (and the client's small node,
// when it sends no Envoy node), encoded.
type encodedACK struct {
	names []string // a copy: the fleet's name lists are shared
	b     []byte
}

// appendSotwACK appends the encoding of a SotW ACK of type t naming names,
// the message ack builds for grpc-go's client. Every ACK of a type repeats
// the node, the names and the type until the names change, so those are
// encoded once (an Envoy node, ~24 KiB, is the client's already:
// c.envoyNode) and the fields put in order around them: version (1),
// node (2), names (3) and type (4), nonce (5), as Envoy's encoder
// writes them. For 50 names this was ~12 % of the load generator's CPU
// in S2, ~2 µs per ACK (bench/README.md).
func (c *Client) appendSotwACK(out []byte, t Type, names []string) []byte {
	a := &c.acks[t]
	if a.b == nil || !slices.Equal(a.names, names) {
		m := &discoveryv3.DiscoveryRequest{TypeUrl: typeURLs[t], ResourceNames: names}
		if c.envoyNode == nil {
			m.Node = c.node
		}
		b, err := proto.Marshal(m)
		if err != nil {
			panic(err) // a request built in code always encodes
		}
		a.names, a.b = slices.Clone(names), b
	}
	if v := c.version[t]; v != "" {
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendString(out, v)
	}
	out = append(out, c.envoyNode...) // field 2, nil without one
	out = append(out, a.b...)
	if n := c.nonce[t]; n != "" {
		out = protowire.AppendTag(out, 5, protowire.BytesType)
		out = protowire.AppendString(out, n)
	}
	return out
}

func (c *Client) nack(t Type, err error) {
	c.f.NACKs.Add(1)
	if c.mode == Delta {
		c.send(c.withNode(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURLs[t], ResponseNonce: c.nonce[t]}))
		return
	}
	c.ack(t) // previous version, new nonce: close enough to a NACK for load purposes
	_ = err
}

func (c *Client) received(t Type, now time.Time) {
	c.firstResp.CompareAndSwap(0, now.UnixNano())
	c.f.Responses[t].Add(1)
	c.f.Bytes[t].Add(int64(c.lastSize))
	c.pushes[t].Add(1)
	if hold := c.f.cfg.HoldOff; hold > 0 && !c.lastPush[t].IsZero() && now.Sub(c.lastPush[t]) < hold {
		c.fastPushes.Add(1)
	}
	c.lastPush[t] = now
}

// decoded is what the client keeps from one resource.
type decoded struct {
	name    string
	eds     string   // clusters: the EDS name, "" if not EDS
	routes  []string // listeners: RDS names
	matched bool     // endpoints: the probe matched
}

const hcmType = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"

func routeNames(l *listenerv3.Listener) ([]string, error) {
	var names []string
	chains := l.GetFilterChains()
	if dc := l.GetDefaultFilterChain(); dc != nil {
		chains = append(slices.Clip(chains), dc)
	}
	var anys []*anypb.Any
	if a := l.GetApiListener().GetApiListener(); a != nil {
		anys = append(anys, a)
	}
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			if tc := f.GetTypedConfig(); tc != nil && tc.GetTypeUrl() == hcmType {
				anys = append(anys, tc)
			}
		}
	}
	for _, a := range anys {
		if a.GetTypeUrl() != hcmType {
			continue
		}
		h := new(hcmv3.HttpConnectionManager)
		if err := a.UnmarshalTo(h); err != nil {
			return nil, err
		}
		if n := h.GetRds().GetRouteConfigName(); n != "" {
			names = append(names, n)
		}
	}
	return names, nil
}

// process handles the decoded resources of one response of type t: it
// follows subscriptions, then ACKs, then records sync and probe state.
func (c *Client) process(t Type, items []decoded, removed []string, now time.Time) {
	probe := c.f.probe.Load()
	hitProbe := false
	switch t {
	case CDS:
		c.got[CDS] = true
		var want []string
		for _, d := range items {
			// Like Envoy: EDS for every EDS cluster it holds; a proxy
			// cannot skip the endpoints of a cluster it was given.
			if d.eds != "" {
				want = append(want, d.eds)
			}
		}
		if c.mode == Delta {
			// Delta CDS carries only changes: merge with what we hold.
			set := make(map[string]bool, len(c.edsNames)+len(want))
			for _, n := range c.edsNames {
				set[n] = true
			}
			for _, n := range want {
				set[n] = true
			}
			for _, n := range removed {
				delete(set, n)
			}
			want = make([]string, 0, len(set))
			for n := range set {
				want = append(want, n)
			}
		}
		slices.Sort(want)
		c.resubscribe(EDS, &c.edsNames, want)
		c.ack(CDS)
		if !c.started[LDS] && len(c.edsNames) == 0 && !c.f.cfg.NoListeners {
			c.subscribe(LDS, nil, nil, nil)
		}
	case EDS:
		c.got[EDS] = true
		if c.mode == Delta {
			c.have[EDS] += len(items)
		} else {
			c.have[EDS] = len(items)
		}
		watch := c.f.watch.Load()
		for _, d := range items {
			if d.matched {
				hitProbe = true
			}
			if watch != nil && d.name == *watch {
				if c.narrow {
					c.f.WatchHitsNarrow.Add(1)
				} else {
					c.f.WatchHitsWide.Add(1)
				}
			}
		}
		c.ack(EDS)
		if !c.started[LDS] && !c.f.cfg.NoListeners {
			// Envoy requests LDS once its clusters have warmed.
			c.subscribe(LDS, nil, nil, nil)
		}
	case LDS:
		c.got[LDS] = true
		var want []string
		for _, d := range items {
			want = append(want, d.routes...)
		}
		if c.mode == Delta {
			set := map[string]bool{}
			for _, n := range c.rdsNames {
				set[n] = true
			}
			for _, n := range want {
				set[n] = true
			}
			want = want[:0]
			for n := range set {
				want = append(want, n)
			}
		}
		slices.Sort(want)
		want = slices.Compact(want)
		c.resubscribe(RDS, &c.rdsNames, want)
		c.ack(LDS)
	case RDS:
		c.got[RDS] = true
		if c.mode == Delta {
			c.have[RDS] += len(items)
		} else {
			c.have[RDS] = len(items)
		}
		c.ack(RDS)
	}
	if t == CDS && probe != nil && probe.Cluster != "" {
		present := slices.ContainsFunc(items, func(d decoded) bool { return d.name == probe.Cluster })
		switch {
		case !probe.Removed:
			hitProbe = present
		case c.mode == Delta:
			hitProbe = slices.Contains(removed, probe.Cluster)
		default:
			hitProbe = !present
		}
	}
	ackAt := time.Now()
	if hitProbe && probe != nil {
		var arrived time.Time
		if c.h2 != nil {
			arrived = c.h2.Arrived()
		}
		probe.hit(c.idx, ackAt, arrived)
	}
	if c.syncedAt.Load() == 0 && c.isSynced() {
		c.syncedAt.Store(ackAt.UnixNano())
		if c.f.synced.Add(1) == c.f.syncWant {
			c.f.syncMu.Lock()
			close(c.f.syncedCh)
			c.f.syncMu.Unlock()
		}
	}
}

func (c *Client) isSynced() bool {
	if !c.got[CDS] || !c.got[LDS] && !c.f.cfg.NoListeners {
		return false
	}
	if len(c.edsNames) > 0 && c.have[EDS] < c.need[EDS] {
		return false
	}
	if len(c.rdsNames) > 0 && c.have[RDS] < c.need[RDS] {
		return false
	}
	return true
}

// resubscribe moves a non-wildcard type to want, telling the server before
// the ACK of the response that caused it, as Envoy does.
func (c *Client) resubscribe(t Type, cur *[]string, want []string) {
	if slices.Equal(*cur, want) {
		return
	}
	var added, removed []string
	for _, n := range want {
		if _, ok := slices.BinarySearch(*cur, n); !ok {
			added = append(added, n)
		}
	}
	for _, n := range *cur {
		if _, ok := slices.BinarySearch(want, n); !ok {
			removed = append(removed, n)
		}
	}
	*cur = c.f.internNames(want)
	if c.mode == Delta {
		c.need[t], c.have[t] = len(added), 0
	} else {
		c.need[t], c.have[t] = len(want), 0
	}
	if !c.started[t] && len(want) == 0 {
		return
	}
	c.subscribe(t, *cur, added, removed)
}

func (c *Client) handleSotW(resp *discoveryv3.DiscoveryResponse) error {
	now := time.Now()
	t, ok := typeOf(resp.GetTypeUrl())
	if !ok {
		return nil
	}
	c.received(t, now)
	probe := c.f.probe.Load()
	items := make([]decoded, 0, len(resp.GetResources()))
	c.nonce[t] = resp.GetNonce()
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() == "type.googleapis.com/envoy.service.discovery.v3.Resource" {
			w := new(discoveryv3.Resource)
			if err := a.UnmarshalTo(w); err != nil {
				c.nack(t, err)
				return nil
			}
			a = w.GetResource()
		}
		d, err := c.decode(t, a, probe)
		if err != nil {
			c.nack(t, err)
			return nil
		}
		items = append(items, d)
	}
	c.version[t] = resp.GetVersionInfo()
	v := c.version[t]
	c.held[t].Store(&v)
	c.process(t, items, nil, now)
	return nil
}

func (c *Client) handleDelta(resp *discoveryv3.DeltaDiscoveryResponse) error {
	now := time.Now()
	t, ok := typeOf(resp.GetTypeUrl())
	if !ok {
		return nil
	}
	c.received(t, now)
	probe := c.f.probe.Load()
	c.nonce[t] = resp.GetNonce()
	items := make([]decoded, 0, len(resp.GetResources()))
	for _, r := range resp.GetResources() {
		if r.GetResource() == nil {
			continue
		}
		d, err := c.decode(t, r.GetResource(), probe)
		if err != nil {
			c.nack(t, err)
			return nil
		}
		items = append(items, d)
	}
	c.version[t] = resp.GetSystemVersionInfo()
	v := c.version[t]
	c.held[t].Store(&v)
	c.process(t, items, resp.GetRemovedResources(), now)
	return nil
}
