package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
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

	lat []atomic.Int64 // per client: ns from Start to its ACK; 0 = not yet
	// arr is, per client, ns from Start to when the response that carried
	// the change reached its socket (kernel receive time; HTTP/2 client
	// only): the server's and the network's part of lat, without the
	// load generator's queueing on its one core. 0 = unknown.
	arr       []atomic.Int64
	remaining atomic.Int64
	done      chan struct{}
	// expect, if set, says which clients must see the change (those whose
	// group uses the service); a hit from any other is counted in stray.
	expect []bool
	stray  atomic.Int64
}

// ExpectOnly makes p wait for the clients expect picks only (of n) and
// count hits from the others as stray. It returns p.
func (p *Probe) ExpectOnly(n int, expect func(k int) bool) *Probe {
	p.expect = make([]bool, n)
	want := int64(0)
	for k := range n {
		if p.expect[k] = expect(k); p.expect[k] {
			want++
		}
	}
	p.remaining.Store(want)
	if want == 0 {
		close(p.done)
	}
	return p
}

// Stray is how many clients outside the expected ones saw the change.
func (p *Probe) Stray() int64 { return p.stray.Load() }

// NewProbe waits for n clients.
func NewProbe(addr string, port int, h corev3.HealthStatus, n int) *Probe {
	p := &Probe{Addr: addr, Port: uint32(port), Health: h, lat: make([]atomic.Int64, n), arr: make([]atomic.Int64, n), done: make(chan struct{})}
	p.remaining.Store(int64(n))
	return p
}

// NewClusterProbe waits for n clients to see cluster added or removed.
func NewClusterProbe(cluster string, removed bool, n int) *Probe {
	p := &Probe{Cluster: cluster, Removed: removed, lat: make([]atomic.Int64, n), arr: make([]atomic.Int64, n), done: make(chan struct{})}
	p.remaining.Store(int64(n))
	return p
}

// Done is closed once every client has ACKed the change.
func (p *Probe) Done() <-chan struct{} { return p.done }

// Latencies returns each client's latency; missing ones are left out.
func (p *Probe) Latencies() []time.Duration {
	out := make([]time.Duration, 0, len(p.lat))
	for i := range p.lat {
		if v := p.lat[i].Load(); v > 0 && (p.expect == nil || p.expect[i]) {
			out = append(out, time.Duration(v))
		}
	}
	return out
}

// Arrivals returns, for the clients whose arrival is known, the time from
// Start until the change reached their sockets.
func (p *Probe) Arrivals() []time.Duration {
	var out []time.Duration
	for i := range p.arr {
		if v := p.arr[i].Load(); v > 0 && (p.expect == nil || p.expect[i]) {
			out = append(out, time.Duration(v))
		}
	}
	return out
}

// Missing is how many clients have not ACKed the change.
func (p *Probe) Missing() int { return int(p.remaining.Load()) }

// hit records client idx's ACK of the change at at, and when the response
// carrying it reached the client's socket (arrived; zero if unknown).
func (p *Probe) hit(idx int, at, arrived time.Time) {
	if idx >= len(p.lat) {
		return
	}
	if p.expect != nil && !p.expect[idx] {
		if p.lat[idx].CompareAndSwap(0, 1) {
			p.stray.Add(1)
		}
		return
	}
	d := max(int64(at.Sub(p.Start)), 1)
	if p.lat[idx].CompareAndSwap(0, d) {
		if !arrived.IsZero() {
			p.arr[idx].Store(max(int64(arrived.Sub(p.Start)), 1))
		}
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
	// Addrs, if set, are replicas: each connection goes to one of them in
	// turn, as Envoys whose bootstrap lists both pick one.
	Addrs []string
	// AddrOf, if set, is client k's address, over Addr and Addrs (the
	// agent tier: each agent's socket, agents.go).
	AddrOf func(k int) string
	// NodeID names client k; Cluster is node.cluster for all, unless
	// ClusterOf says client k's.
	NodeID    func(k int) string
	Cluster   string
	ClusterOf func(k int) string
	// Mode picks client k's protocol.
	Mode func(k int) Mode
	// Narrow marks the clients of the sidecar-like group (the routed
	// services only), as opposed to the edge group (every cluster). It
	// changes only what S7 expects: every client asks for the endpoints
	// of every cluster it receives, as Envoy must.
	Narrow func(k int) bool
	// NoListeners makes every client an Envoy with static listeners and
	// only cds_config over ADS: it never asks for LDS, and is in full state
	// once it holds its clusters and their endpoints.
	NoListeners bool
	// HoldOff is the debounce window: pushes to one client closer together
	// than this are counted as FastPushes.
	HoldOff time.Duration
	// StreamsPerConn is how many clients share one gRPC connection (0 or
	// 1: each its own, as Envoy).
	StreamsPerConn int
	// SharedDecode lets clients share the decoding of identical resource
	// bytes (decodememo.go): the load generator then stands for Envoys
	// that each decode on a core of their own.
	SharedDecode bool
	// EnvoyNode: clients present an Envoy build's node (internal/envoynode,
	// ~24 KiB with its extension list) with every request, as Envoy does
	// unless its bootstrap sets set_node_on_first_message_only.
	EnvoyNode bool
	// H2: clients speak HTTP/2 themselves (h2stream.go), one goroutine
	// each that reads, decodes and ACKs inline as Envoy's event loop
	// does, instead of through grpc-go's client. One stream per
	// connection.
	H2 bool
}

func (c *FleetConfig) clusterOf(k int) string {
	if c.ClusterOf != nil {
		return c.ClusterOf(k)
	}
	return c.Cluster
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

	connMu sync.Mutex
	conns  map[int]*grpc.ClientConn // shared connections (StreamsPerConn > 1)

	memo *decodeMemo // nil unless SharedDecode
}

// NewFleet makes an empty fleet.
func NewFleet(cfg FleetConfig) *Fleet {
	f := &Fleet{cfg: cfg, intern: map[string][]string{}}
	if cfg.SharedDecode {
		f.memo = &decodeMemo{}
	}
	return f
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
	f.connMu.Lock()
	for _, conn := range f.conns {
		conn.Close()
	}
	f.conns = nil
	f.connMu.Unlock()
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

// ReplicaOf is the index in Addrs of the replica client k is connected to.
func (c *FleetConfig) ReplicaOf(k int) int {
	if len(c.Addrs) == 0 {
		return 0
	}
	return k / max(c.StreamsPerConn, 1) % len(c.Addrs)
}

func (c *FleetConfig) addrOf(k int) string {
	if c.AddrOf != nil {
		return c.AddrOf(k)
	}
	if len(c.Addrs) == 0 {
		return c.Addr
	}
	return c.Addrs[c.ReplicaOf(k)]
}

// VersionsByReplica lists, per replica and type, the distinct versions the
// clients connected to it hold.
func (f *Fleet) VersionsByReplica() []map[string][]string {
	out := make([]map[string][]string, max(len(f.cfg.Addrs), 1))
	for k, c := range f.clients {
		if c == nil {
			continue
		}
		r := f.cfg.ReplicaOf(k)
		if out[r] == nil {
			out[r] = map[string][]string{}
		}
		for t := range c.held {
			if v := c.held[t].Load(); v != nil {
				name := Type(t).String()
				if !slices.Contains(out[r][name], *v) {
					out[r][name] = append(out[r][name], *v)
				}
			}
		}
	}
	for _, m := range out {
		for _, vs := range m {
			slices.Sort(vs)
		}
	}
	return out
}

// connFor is client k's connection: its own, or the one it shares with
// the StreamsPerConn clients around it.
func (f *Fleet) connFor(k int, addr string) (*grpc.ClientConn, error) {
	if f.cfg.StreamsPerConn <= 1 {
		return f.newConn(addr)
	}
	f.connMu.Lock()
	defer f.connMu.Unlock()
	i := k / f.cfg.StreamsPerConn
	if conn := f.conns[i]; conn != nil {
		return conn, nil
	}
	conn, err := f.newConn(addr)
	if err != nil {
		return nil, err
	}
	if f.conns == nil {
		f.conns = map[int]*grpc.ClientConn{}
	}
	f.conns[i] = conn
	return conn, nil
}

// newConn dials the server as Envoy's HTTP/2 client does: fixed large
// flow-control windows (256 MiB per stream and per connection, an older
// Envoy's defaults; the Envoy API this project builds against says 16 and
// 24 MiB, fixed as well), so no BDP pings — grpc-go's default client pings the
// server whenever data arrives, which Envoy never does.
func (f *Fleet) newConn(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithReadBufferSize(16<<10), grpc.WithWriteBufferSize(16<<10),
		grpc.WithInitialWindowSize(256<<20), grpc.WithInitialConnWindowSize(256<<20),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
}
