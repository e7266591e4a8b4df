// Package adsclient is an xDS client that talks to an ADS server the way
// Envoy does on the wire. It has two users, so a change here changes both:
//   - the per-VM agent's relay (agent/upstream.go) holds the central
//     bridge's resources through it and re-serves them to local proxies;
//   - with no Envoy binary in our test environments, integration tests and
//     the load harness drive the server through it as the conformance
//     check, and assert on what it ends up holding.
//
// Envoy behaviour it reproduces:
//   - wildcard CDS first; LDS only once the clusters of the first CDS
//     response have warmed (their ClusterLoadAssignments arrived) or the
//     initial fetch timeout passed, because Envoy starts LDS after cluster
//     manager initialisation;
//   - EDS subscriptions follow the EDS clusters and RDS subscriptions follow
//     the route_config_name of HTTP connection managers, and the request that
//     changes them is sent before the ACK of the CDS/LDS response that caused
//     it (Envoy pauses EDS/RDS while applying CDS/LDS);
//   - SDS subscriptions follow the secrets that the TLS transport sockets
//     of clusters and listener filter chains name with an ADS sds_config,
//     and a cluster has warmed only once its secrets arrived, as in Envoy;
//   - resources are decoded into their concrete types and validated with
//     their protoc-gen-validate rules, and a response that fails is NACKed
//     and its content discarded.
//
// One Client is one stream: when it ends, the client is finished and Err
// reports why. Reconnecting (with back-off, keeping the last good state
// meanwhile) is the caller's: the agent's upstream dials a new Client.
package adsclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Type URLs of the resources the client subscribes to.
const (
	ClusterType  = resourcev3.ClusterType
	EndpointType = resourcev3.EndpointType
	ListenerType = resourcev3.ListenerType
	RouteType    = resourcev3.RouteType
	SecretType   = resourcev3.SecretType
)

// DefaultInitialFetchTimeout is Envoy's default initial_fetch_timeout, used
// here as the longest LDS waits for cluster warming.
const DefaultInitialFetchTimeout = 15 * time.Second

// ErrClosed is what Err and Wait report after Close.
var ErrClosed = errors.New("adsclient: client closed")

// Mode selects the xDS protocol variant.
type Mode int

const (
	// SotW is state-of-the-world ADS (StreamAggregatedResources).
	SotW Mode = iota
	// Delta is incremental ADS (DeltaAggregatedResources).
	Delta
)

// String returns "sotw" or "delta", handy as a subtest name.
func (m Mode) String() string {
	switch m {
	case SotW:
		return "sotw"
	case Delta:
		return "delta"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Config describes the client's node and how it talks to the server.
type Config struct {
	// Addr is the host:port of the ADS server.
	Addr string
	// NodeID is node.id; required, as control planes key snapshots on it.
	NodeID string
	// Cluster is node.cluster.
	Cluster string
	// Metadata is node.metadata (string values), e.g. consul_node.
	Metadata map[string]string
	// UserAgent is node.user_agent_name; empty means "envoy".
	UserAgent string
	// UserAgentVersion, if set, is node.user_agent_version ("1.22.11"):
	// an Envoy of that version, which the bridge serves what it knows.
	UserAgentVersion string
	// Extensions is node.extensions, as an Envoy build lists them
	// (internal/envoynode): what makes an Envoy's node 10–25 KiB.
	Extensions []*corev3.Extension
	// Mode selects SotW or Delta.
	Mode Mode
	// InitialFetchTimeout bounds how long LDS waits for the first clusters
	// to warm, measured from Dial. Zero means DefaultInitialFetchTimeout;
	// negative requests LDS right away.
	InitialFetchTimeout time.Duration
	// NoListeners never subscribes to listeners: an Envoy with static
	// listeners and only cds_config over ADS, a common VM set-up.
	NoListeners bool
	// NACK, if set, is asked about every response that decoded and
	// validated; a non-nil error makes the client NACK it instead of
	// ACKing it. version is version_info (SotW) or system_version_info
	// (Delta); resources are the resource bodies (unwrapped from
	// discovery.v3.Resource). It runs on the stream goroutine.
	NACK func(typeURL, version string, resources []*anypb.Any) error
	// OnUpdate, if set, is called for every accepted response with the
	// state right after applying it, in receive order, on the stream
	// goroutine; it must not block for long, as it holds up the stream, and
	// must not call Close, which waits for that goroutine.
	OnUpdate func(Update)
	// TLS, if set, connects over TLS with this configuration (client
	// certificates included); nil connects in plaintext.
	TLS *tls.Config
	// NodeOnFirstMessageOnly is Envoy's set_node_on_first_message_only:
	// only the stream's first request carries the node. The xDS protocol
	// guarantees the node on the first request only, so a server keeps
	// it; the rest leave it out rather than carry it with every ACK, as
	// the bootstrap the bridge writes for Envoys asks too (the agent's
	// relay sets it). Off, every request carries it, as Envoy's default
	// does.
	NodeOnFirstMessageOnly bool
	// MaxMessageSize bounds one response the client accepts, in bytes;
	// zero means DefaultMaxMessageSize. gRPC's own default (4 MiB) is
	// below what the bridge sends, and a larger response ends the stream
	// with ResourceExhausted.
	MaxMessageSize int
}

// DefaultMaxMessageSize is the largest response the bridge sends (its
// gRPC MaxSendMsgSize, xds/serve), so a client accepts whatever it may get.
const DefaultMaxMessageSize = 64 << 20

// Update is one accepted response and the state it produced.
type Update struct {
	// TypeURL is the type of the response.
	TypeURL string
	// Version is version_info (SotW) or system_version_info (Delta).
	Version string
	// Nonce is the response nonce.
	Nonce string
	// Received is when the response came off the stream, before decoding.
	Received time.Time
	// State is the client's state right after applying the response.
	State State
}

// ResponseInfo records one response as received, accepted or not.
type ResponseInfo struct {
	// TypeURL is the type of the response.
	TypeURL string
	// Version is version_info (SotW) or system_version_info (Delta).
	Version string
	// Nonce is the response nonce.
	Nonce string
	// Resources is the number of resources carried.
	Resources int
	// Removed is the number of Delta removed_resources.
	Removed int
	// Received is when the response came off the stream, before decoding.
	Received time.Time
	// NACK is the error_detail message the client sent back, empty if ACKed.
	NACK string
	// Ignored is set for types the client never subscribed to; Envoy
	// drops those without a reply, and so does the client.
	Ignored bool
}

// Stats counts protocol events per type URL.
type Stats struct {
	// Requests counts requests sent, ACKs and NACKs included.
	Requests map[string]int
	// Responses counts responses received, ignored ones included.
	Responses map[string]int
	// NACKs counts responses rejected.
	NACKs map[string]int
}

// maxResponseLog bounds Responses so a long load run does not grow
// without limit.
const maxResponseLog = 4096

// subscription is the client's protocol state for one type URL.
type subscription struct {
	wildcard bool
	names    map[string]bool // explicit names, for EDS and RDS
	started  bool            // the first request went out
	version  string          // last ACKed version_info (SotW)
	nonce    string          // nonce of the last response of this type
}

// Client is one ADS stream. Create it with Dial.
type Client struct {
	cfg    Config
	conn   *grpc.ClientConn
	stream grpc.ClientStream
	node   *corev3.Node
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	timer  *time.Timer
	once   sync.Once

	mu      sync.Mutex
	state   State
	changed chan struct{} // closed and replaced on every state change
	done    chan struct{} // closed when the stream ends
	err     error
	subs    map[string]*subscription
	// routesOf caches the RDS names each listener refers to, since working
	// them out means decoding the HCM of every filter chain.
	routesOf map[string][]string
	// secretsOf caches the SDS names each cluster and listener refers to,
	// by type URL, then resource name.
	secretsOf  map[string]map[string][]string
	ldsStarted bool
	cdsSeen    bool
	// warming holds what LDS waits for: EDS names, and the SDS names of
	// clusters' secrets prefixed with warmSecret.
	warming map[string]bool
	queue   []proto.Message
	// nodeQueued: a request with the node is queued (NodeOnFirstMessageOnly).
	nodeQueued bool
	wake       chan struct{}
	stats      Stats
	log        []ResponseInfo // ring buffer once full
	logNext    int            // oldest entry when the ring is full
}

// Dial opens an ADS stream to cfg.Addr (plaintext) and sends the initial
// CDS request; everything after that happens in the background. ctx bounds
// only the stream set-up; use Close to end the client.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Addr == "" || cfg.NodeID == "" {
		return nil, errors.New("adsclient: Config.Addr and Config.NodeID are required")
	}
	if cfg.Mode != SotW && cfg.Mode != Delta {
		return nil, fmt.Errorf("adsclient: unknown mode %v", cfg.Mode)
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "envoy"
	}
	if cfg.InitialFetchTimeout == 0 {
		cfg.InitialFetchTimeout = DefaultInitialFetchTimeout
	}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	if cfg.MaxMessageSize <= 0 {
		cfg.MaxMessageSize = DefaultMaxMessageSize
	}
	conn, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.MaxMessageSize)),
		// Fixed windows, as Envoy keeps them. gRPC's default windows grow
		// by estimating the bandwidth-delay product, which pings the
		// server after received data: a ping and its ack for every
		// response, a read and a write more for the server per push (an
		// agent's relay to the central bridge cost the central about as
		// much again as the push).
		grpc.WithInitialWindowSize(envoyStreamWindow), grpc.WithInitialConnWindowSize(envoyConnWindow))
	if err != nil {
		return nil, fmt.Errorf("adsclient: %w", err)
	}
	// The stream must outlive ctx, so it gets its own context, cancelled by
	// ctx only while the stream is being opened.
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	var stream grpc.ClientStream
	if cfg.Mode == Delta {
		stream, err = ads.DeltaAggregatedResources(sctx)
	} else {
		stream, err = ads.StreamAggregatedResources(sctx)
	}
	if !stop() {
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, fmt.Errorf("adsclient: opening %v stream to %s: %w", cfg.Mode, cfg.Addr, err)
	}

	c := &Client{
		cfg:    cfg,
		conn:   conn,
		stream: stream,
		node: &corev3.Node{
			Id:            cfg.NodeID,
			Cluster:       cfg.Cluster,
			Metadata:      nodeMetadata(cfg.Metadata),
			UserAgentName: cfg.UserAgent,
			Extensions:    cfg.Extensions,
			// Client features every current Envoy advertises; some control
			// planes look at them.
			ClientFeatures: []string{
				"envoy.lb.does_not_support_overprovisioning",
				"envoy.lrs.supports_send_all_clusters",
			},
		},
		ctx:     sctx,
		cancel:  cancel,
		state:   State{Types: map[string]TypeState{}},
		changed: make(chan struct{}),
		done:    make(chan struct{}),
		subs: map[string]*subscription{
			ClusterType:  {wildcard: true},
			ListenerType: {wildcard: true},
			EndpointType: {names: map[string]bool{}},
			RouteType:    {names: map[string]bool{}},
			SecretType:   {names: map[string]bool{}},
		},
		routesOf:  map[string][]string{},
		secretsOf: map[string]map[string][]string{ClusterType: {}, ListenerType: {}},
		warming:   map[string]bool{},
		wake:      make(chan struct{}, 1),
		stats: Stats{
			Requests:  map[string]int{},
			Responses: map[string]int{},
			NACKs:     map[string]int{},
		},
	}
	if cfg.UserAgentVersion != "" {
		c.node.UserAgentVersionType = &corev3.Node_UserAgentVersion{UserAgentVersion: cfg.UserAgentVersion}
	}

	c.mu.Lock()
	c.start(ClusterType)
	if cfg.InitialFetchTimeout < 0 {
		c.startLDS()
	} else {
		c.timer = time.AfterFunc(cfg.InitialFetchTimeout, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.startLDS()
		})
	}
	c.mu.Unlock()

	c.wg.Add(2)
	go c.writeLoop()
	go c.readLoop()
	return c, nil
}

// Close ends the stream and waits for the client's goroutines.
func (c *Client) Close() error {
	var err error
	c.once.Do(func() {
		c.finish(ErrClosed)
		if c.timer != nil {
			c.timer.Stop()
		}
		c.cancel()
		err = c.conn.Close()
		c.wg.Wait()
	})
	return err
}

// Done is closed when the stream has ended (Err says why).
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is nil while the stream is up, and afterwards why it ended (ErrClosed
// after Close).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Snapshot returns what the client currently holds. The State is immutable
// and shared, so this is cheap.
func (c *Client) Snapshot() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Wait blocks until pred holds for the client's state and returns that
// state. pred is evaluated on the current state first, then after every
// change. If ctx ends or the stream dies first, the error wraps the cause
// and describes the last state, so a failed test shows what was there.
func (c *Client) Wait(ctx context.Context, pred func(State) bool) (State, error) {
	for {
		c.mu.Lock()
		st, changed, done, serr := c.state, c.changed, c.done, c.err
		pending := c.pendingLocked()
		c.mu.Unlock()
		if pred(st) {
			return st, nil
		}
		if serr != nil {
			return st, fmt.Errorf("adsclient: stream ended while waiting: %w; last state: %v%s", serr, st, pending)
		}
		select {
		case <-changed:
		case <-done:
		case <-ctx.Done():
			return st, fmt.Errorf("adsclient: %w while waiting; last state: %v%s", ctx.Err(), st, pending)
		}
	}
}

// pendingLocked explains a stall that is not visible in State: LDS held
// back for cluster warming, as Envoy does.
func (c *Client) pendingLocked() string {
	if c.ldsStarted {
		return ""
	}
	if !c.cdsSeen {
		return " (LDS not requested yet: no CDS response)"
	}
	var eds, sds []string
	for _, n := range sortedKeys(c.warming) {
		if s, ok := strings.CutPrefix(n, warmSecret); ok {
			sds = append(sds, s)
		} else {
			eds = append(eds, n)
		}
	}
	waiting := fmt.Sprintf("EDS %v", eds)
	switch {
	case len(sds) > 0 && len(eds) == 0:
		waiting = fmt.Sprintf("SDS %v", sds)
	case len(sds) > 0:
		waiting += fmt.Sprintf(" and SDS %v", sds)
	}
	return " (LDS not requested yet: clusters warming, waiting for " + waiting + ")"
}

// Stats returns a copy of the protocol counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		Requests:  cloneMap(c.stats.Requests),
		Responses: cloneMap(c.stats.Responses),
		NACKs:     cloneMap(c.stats.NACKs),
	}
}

// Responses returns the most recent responses received (up to 4096), oldest
// first.
func (c *Client) Responses() []ResponseInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(slices.Clone(c.log[c.logNext:]), c.log[:c.logNext]...)
}

// finish records why the stream ended; the first cause wins.
func (c *Client) finish(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
	c.mu.Unlock()
	c.cancel()
}

// enqueueLocked hands a request to the writer. Sending happens on its own
// goroutine so that the reader never blocks on flow control while the
// server is blocked sending to us.
func (c *Client) enqueueLocked(typeURL string, m proto.Message) {
	// The queue is sent in order: the first request queued is the
	// stream's first on the wire.
	if c.cfg.NodeOnFirstMessageOnly && c.nodeQueued {
		switch r := m.(type) {
		case *discoveryv3.DeltaDiscoveryRequest:
			r.Node = nil
		case *discoveryv3.DiscoveryRequest:
			r.Node = nil
		}
	}
	c.nodeQueued = true
	c.stats.Requests[typeURL]++
	c.queue = append(c.queue, m)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Client) writeLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.wake:
		}
		c.mu.Lock()
		q := c.queue
		c.queue = nil
		c.mu.Unlock()
		for _, m := range q {
			if err := c.stream.SendMsg(m); err != nil {
				// io.EOF means the stream is gone; RecvMsg reports the real
				// status to the reader.
				if !errors.Is(err, io.EOF) {
					c.finish(fmt.Errorf("adsclient: send: %w", err))
				}
				return
			}
		}
	}
}

func (c *Client) readLoop() {
	defer c.wg.Done()
	for {
		var err error
		if c.cfg.Mode == Delta {
			resp := new(discoveryv3.DeltaDiscoveryResponse)
			if err = c.stream.RecvMsg(resp); err == nil {
				c.handleDelta(resp, time.Now())
			}
		} else {
			resp := new(discoveryv3.DiscoveryResponse)
			if err = c.stream.RecvMsg(resp); err == nil {
				c.handleSotW(resp, time.Now())
			}
		}
		if err != nil {
			c.finish(fmt.Errorf("adsclient: stream: %w", err))
			return
		}
	}
}

func (c *Client) recordLocked(ri ResponseInfo) {
	c.stats.Responses[ri.TypeURL]++
	if ri.NACK != "" {
		c.stats.NACKs[ri.TypeURL]++
	}
	if len(c.log) < maxResponseLog {
		c.log = append(c.log, ri)
		return
	}
	c.log[c.logNext] = ri
	c.logNext = (c.logNext + 1) % maxResponseLog
}

// publishLocked installs a new state and wakes waiters; it returns the
// Update for OnUpdate, which the caller delivers after unlocking.
func (c *Client) publishLocked(st State, typeURL, version, nonce string, at time.Time) Update {
	c.state = st
	close(c.changed)
	c.changed = make(chan struct{})
	return Update{TypeURL: typeURL, Version: version, Nonce: nonce, Received: at, State: st}
}

// Envoy's default HTTP/2 flow-control windows (Http2ProtocolOptions
// initial_stream_window_size, 16 MiB, and initial_connection_window_size,
// 24 MiB, in the Envoy API this project builds against).
const (
	envoyStreamWindow = 16 << 20
	envoyConnWindow   = 24 << 20
)

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func nodeMetadata(m map[string]string) *structpb.Struct {
	if len(m) == 0 {
		return nil
	}
	st := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range m {
		st.Fields[k] = structpb.NewStringValue(v)
	}
	return st
}
