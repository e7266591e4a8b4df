package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Mode is the xDS protocol variant of a simulated Envoy.
type Mode int

const (
	SotW Mode = iota
	Delta
)

func (m Mode) String() string {
	if m == Delta {
		return "delta"
	}
	return "sotw"
}

// Type indexes the four resource types.
type Type int

const (
	CDS Type = iota
	EDS
	LDS
	RDS
	numTypes
)

var typeURLs = [numTypes]string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType}

func typeOf(url string) (Type, bool) {
	for t, u := range typeURLs {
		if u == url {
			return Type(t), true
		}
	}
	return 0, false
}

func (t Type) String() string { return [...]string{"CDS", "EDS", "LDS", "RDS"}[t] }

// Probe is the change the fleet is waiting for: an endpoint (address and
// port) reaching a health status, seen in an EDS response.
type Probe struct {
	Addr   string
	Port   uint32
	Health corev3.HealthStatus
	// Cluster, if set, makes this a CDS probe instead: the cluster
	// appearing (or, with Removed, disappearing) in a CDS response.
	Cluster string
	Removed bool
	Start   time.Time

	lat       []atomic.Int64 // per client: ns from Start to its ACK; 0 = not yet
	remaining atomic.Int64
	done      chan struct{}
}

// NewProbe waits for n clients.
func NewProbe(addr string, port int, h corev3.HealthStatus, n int) *Probe {
	p := &Probe{Addr: addr, Port: uint32(port), Health: h, lat: make([]atomic.Int64, n), done: make(chan struct{})}
	p.remaining.Store(int64(n))
	return p
}

// NewClusterProbe waits for n clients to see cluster added or removed.
func NewClusterProbe(cluster string, removed bool, n int) *Probe {
	p := &Probe{Cluster: cluster, Removed: removed, lat: make([]atomic.Int64, n), done: make(chan struct{})}
	p.remaining.Store(int64(n))
	return p
}

// Done is closed once every client has ACKed the change.
func (p *Probe) Done() <-chan struct{} { return p.done }

// Latencies returns each client's latency; missing ones are left out.
func (p *Probe) Latencies() []time.Duration {
	out := make([]time.Duration, 0, len(p.lat))
	for i := range p.lat {
		if v := p.lat[i].Load(); v > 0 {
			out = append(out, time.Duration(v))
		}
	}
	return out
}

// Missing is how many clients have not ACKed the change.
func (p *Probe) Missing() int { return int(p.remaining.Load()) }

func (p *Probe) hit(idx int, at time.Time) {
	if idx >= len(p.lat) {
		return
	}
	d := max(int64(at.Sub(p.Start)), 1)
	if p.lat[idx].CompareAndSwap(0, d) {
		if p.remaining.Add(-1) == 0 {
			close(p.done)
		}
	}
}

func (p *Probe) matches(cla *endpointv3.ClusterLoadAssignment) bool {
	for _, loc := range cla.GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			if sa.GetPortValue() == p.Port && sa.GetAddress() == p.Addr {
				return lb.GetHealthStatus() == p.Health
			}
		}
	}
	return false
}

// FleetConfig describes the simulated Envoys.
type FleetConfig struct {
	Addr string
	// NodeID names client k; Cluster is node.cluster for all.
	NodeID  func(k int) string
	Cluster string
	// Mode picks client k's protocol.
	Mode func(k int) Mode
	// Narrow picks clients that subscribe to EDS only for NarrowEDS
	// names (like a sidecar with a few upstreams), not every cluster.
	Narrow    func(k int) bool
	NarrowEDS map[string]bool
	// HoldOff is the debounce window: pushes to one client closer together
	// than this are counted as FastPushes.
	HoldOff time.Duration
}

// Fleet is N simulated Envoys in one process.
type Fleet struct {
	cfg     FleetConfig
	clients []*Client
	probe   atomic.Pointer[Probe]
	watch   atomic.Pointer[string] // EDS name whose deliveries are counted
	// WatchHits counts EDS responses carrying the watched name, by whether
	// the receiving client was narrow.
	WatchHitsWide, WatchHitsNarrow atomic.Int64

	Responses [numTypes]atomic.Int64
	Bytes     [numTypes]atomic.Int64
	NACKs     atomic.Int64
	synced    atomic.Int64
	syncedCh  chan struct{}
	syncMu    sync.Mutex
	syncWant  int64

	internMu sync.Mutex
	intern   map[string][]string
}

// NewFleet makes an empty fleet.
func NewFleet(cfg FleetConfig) *Fleet {
	return &Fleet{cfg: cfg, intern: map[string][]string{}}
}

// internNames shares identical sorted name lists between clients, so a
// thousand Envoys subscribed to the same thousand EDS names hold one list.
func (f *Fleet) internNames(names []string) []string {
	key := strings.Join(names, "\x00")
	f.internMu.Lock()
	defer f.internMu.Unlock()
	if v, ok := f.intern[key]; ok {
		return v
	}
	f.intern[key] = names
	return names
}

// SetProbe installs the change to wait for (nil to stop).
func (f *Fleet) SetProbe(p *Probe) { f.probe.Store(p) }

// WatchEDS counts EDS deliveries of name (empty to stop).
func (f *Fleet) WatchEDS(name string) {
	if name == "" {
		f.watch.Store(nil)
		return
	}
	f.watch.Store(&name)
}

// Clients returns the connected clients.
func (f *Fleet) Clients() []*Client { return f.clients }

// Len is the number of clients.
func (f *Fleet) Len() int { return len(f.clients) }

// Connect dials n clients, at most parallel at a time (0: all at once),
// and waits until all have full state or timeout passes.
func (f *Fleet) Connect(ctx context.Context, n, parallel int, timeout time.Duration) (ConnectResult, error) {
	f.syncMu.Lock()
	f.synced.Store(0)
	f.syncWant = int64(n)
	f.syncedCh = make(chan struct{})
	ch := f.syncedCh
	f.syncMu.Unlock()
	if parallel <= 0 {
		parallel = n
	}
	start := time.Now()
	f.clients = make([]*Client, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for k := 0; k < n; k++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := f.dial(ctx, k)
			if err != nil {
				errs <- err
				return
			}
			f.clients[k] = c
		}(k)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		f.Close()
		return ConnectResult{}, err
	}
	res := ConnectResult{Dialled: time.Since(start)}
	select {
	case <-ch:
	case <-time.After(timeout):
	case <-ctx.Done():
	}
	res.Synced = int(f.synced.Load())
	for _, c := range f.clients {
		if fr := c.firstResp.Load(); fr > 0 {
			res.FirstResponse = append(res.FirstResponse, time.Duration(fr-c.dialedAt.UnixNano()))
		}
		if s := c.syncedAt.Load(); s > 0 {
			res.SyncTimes = append(res.SyncTimes, time.Duration(s-c.dialedAt.UnixNano()))
			res.AllSynced = max(res.AllSynced, time.Duration(s-start.UnixNano()))
		}
	}
	if res.Synced < n {
		return res, fmt.Errorf("%d of %d clients synced within %v%s", res.Synced, n, timeout, f.stuck())
	}
	return res, nil
}

func (f *Fleet) stuck() string {
	for _, c := range f.clients {
		if c != nil && c.syncedAt.Load() == 0 {
			return "; e.g. " + c.describe()
		}
	}
	return ""
}

// ConnectResult is how connecting the fleet went.
type ConnectResult struct {
	Dialled       time.Duration   // until every stream was open
	AllSynced     time.Duration   // until the last client had full state
	Synced        int             // clients with full state
	FirstResponse []time.Duration // per client, dial to first response
	SyncTimes     []time.Duration // per client, dial to full state
}

// Close ends every client.
func (f *Fleet) Close() {
	var wg sync.WaitGroup
	for _, c := range f.clients {
		if c != nil {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
	}
	wg.Wait()
	f.clients = nil
}

// ResetPushCounts zeroes every client's per-type response counts.
func (f *Fleet) ResetPushCounts() {
	for _, c := range f.clients {
		for t := range c.pushes {
			c.pushes[t].Store(0)
		}
		c.fastPushes.Store(0)
	}
}

// PushCounts returns, per type, the max and total responses per client
// since the last reset, and the number of pushes that came within HoldOff
// of the previous one of the same type.
func (f *Fleet) PushCounts() (maxPer, total [numTypes]int64, fast int64) {
	for _, c := range f.clients {
		for t := range c.pushes {
			v := c.pushes[t].Load()
			maxPer[t] = max(maxPer[t], v)
			total[t] += v
		}
		fast += c.fastPushes.Load()
	}
	return
}

// TotalBytes is the xDS payload received so far, all types.
func (f *Fleet) TotalBytes() int64 {
	var n int64
	for t := range f.Bytes {
		n += f.Bytes[t].Load()
	}
	return n
}

// Errors returns the first stream error of any client, if any ended.
func (f *Fleet) Errors() error {
	for _, c := range f.clients {
		if c == nil {
			continue
		}
		if err := c.Err(); err != nil {
			return fmt.Errorf("client %s: %w", c.nodeID, err)
		}
	}
	return nil
}

// Client is one lean simulated Envoy: it decodes every resource the way
// Envoy must (full proto unmarshal, HCMs of listeners for RDS names),
// follows EDS/RDS subscriptions, ACKs, and keeps only names and counters —
// a few hundred bytes plus shared name lists per client.
type Client struct {
	f      *Fleet
	idx    int
	nodeID string
	mode   Mode
	narrow bool
	node   *corev3.Node
	conn   *grpc.ClientConn
	stream grpc.ClientStream
	cancel context.CancelFunc
	sendq  chan proto.Message
	done   chan struct{}
	wg     sync.WaitGroup
	err    atomic.Pointer[error]

	dialedAt   time.Time
	firstResp  atomic.Int64
	syncedAt   atomic.Int64
	pushes     [numTypes]atomic.Int64
	fastPushes atomic.Int64
	lastSize   int

	// reader-goroutine state
	version    [numTypes]string
	nonce      [numTypes]string
	got        [numTypes]bool
	started    [numTypes]bool
	need, have [numTypes]int // EDS/RDS: resources still expected since the last subscription change
	edsNames   []string
	rdsNames   []string
	lastPush   [numTypes]time.Time
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
		sendq:  make(chan proto.Message, 64),
		done:   make(chan struct{}),
	}
	c.node = &corev3.Node{
		Id: c.nodeID, Cluster: f.cfg.Cluster, UserAgentName: "envoy",
		// Consul checks the Envoy version; 1.25 is the newest 1.15 supports.
		UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{
			Version: &typev3.SemanticVersion{MajorNumber: 1, MinorNumber: 25, Patch: 4},
		}},
		Metadata:       &structpb.Struct{Fields: map[string]*structpb.Value{}},
		ClientFeatures: []string{"envoy.lb.does_not_support_overprovisioning", "envoy.lrs.supports_send_all_clusters"},
	}
	conn, err := grpc.NewClient(f.cfg.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithReadBufferSize(16<<10), grpc.WithWriteBufferSize(16<<10),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20),
			grpc.ForceCodecV2(countingCodec{CodecV2: encoding.GetCodecV2("proto"), c: c})))
	if err != nil {
		return nil, err
	}
	c.conn = conn
	sctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	c.dialedAt = time.Now()
	octx, ocancel := context.WithTimeout(ctx, 60*time.Second)
	stop := context.AfterFunc(octx, cancel)
	if mode == Delta {
		c.stream, err = ads.DeltaAggregatedResources(sctx)
	} else {
		c.stream, err = ads.StreamAggregatedResources(sctx)
	}
	stop()
	ocancel()
	if err != nil {
		cancel()
		conn.Close()
		return nil, fmt.Errorf("client %s: open stream: %w", c.nodeID, err)
	}
	c.subscribe(CDS, nil, nil, nil)
	c.wg.Add(2)
	go c.writeLoop()
	go c.readLoop()
	return c, nil
}

// Close ends the stream and the connection.
func (c *Client) Close() {
	c.cancel()
	c.conn.Close()
	c.wg.Wait()
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
		c.send(req)
		return
	}
	c.send(&discoveryv3.DiscoveryRequest{
		Node: c.node, TypeUrl: typeURLs[t], ResourceNames: names,
		VersionInfo: c.version[t], ResponseNonce: c.nonce[t],
	})
}

func (c *Client) ack(t Type) {
	if c.mode == Delta {
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURLs[t], ResponseNonce: c.nonce[t]})
		return
	}
	var names []string
	switch t {
	case EDS:
		names = c.edsNames
	case RDS:
		names = c.rdsNames
	}
	c.send(&discoveryv3.DiscoveryRequest{
		Node: c.node, TypeUrl: typeURLs[t], ResourceNames: names,
		VersionInfo: c.version[t], ResponseNonce: c.nonce[t],
	})
}

func (c *Client) nack(t Type, err error) {
	c.f.NACKs.Add(1)
	if c.mode == Delta {
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURLs[t], ResponseNonce: c.nonce[t]})
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

func (c *Client) decode(t Type, a *anypb.Any, probe *Probe) (decoded, error) {
	var d decoded
	switch t {
	case CDS:
		m := new(clusterv3.Cluster)
		if err := a.UnmarshalTo(m); err != nil {
			return d, err
		}
		d.name = m.GetName()
		if m.GetType() == clusterv3.Cluster_EDS {
			d.eds = cmp.Or(m.GetEdsClusterConfig().GetServiceName(), m.GetName())
		}
	case EDS:
		m := new(endpointv3.ClusterLoadAssignment)
		if err := a.UnmarshalTo(m); err != nil {
			return d, err
		}
		d.name = m.GetClusterName()
		if probe != nil && probe.Cluster == "" {
			d.matched = probe.matches(m)
		}
	case LDS:
		m := new(listenerv3.Listener)
		if err := a.UnmarshalTo(m); err != nil {
			return d, err
		}
		d.name = m.GetName()
		var err error
		if d.routes, err = routeNames(m); err != nil {
			return d, err
		}
	case RDS:
		m := new(routev3.RouteConfiguration)
		if err := a.UnmarshalTo(m); err != nil {
			return d, err
		}
		d.name = m.GetName()
	}
	return d, nil
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
			if d.eds != "" && (!c.narrow || c.f.cfg.NarrowEDS[d.eds]) {
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
		if !c.started[LDS] && len(c.edsNames) == 0 {
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
		if !c.started[LDS] {
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
		probe.hit(c.idx, ackAt)
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
	if !c.got[CDS] || !c.got[LDS] {
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
	c.process(t, items, resp.GetRemovedResources(), now)
	return nil
}
