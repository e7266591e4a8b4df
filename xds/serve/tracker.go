package serve

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
)

// Proxy and per-type statuses, in the spirit of istioctl proxy-status.
const (
	// StatusSynced: everything sent was ACKed (or is awaiting its ACK for
	// less than StaleAfter).
	StatusSynced = "SYNCED"
	// StatusStale: a response was sent and is not ACKed after StaleAfter.
	StatusStale = "STALE"
	// StatusNACKed: the last response of a type was rejected.
	StatusNACKed = "NACKED"
	// StatusNotSent: nothing was sent yet (e.g. the bridge has not synced).
	StatusNotSent = "NOT_SENT"
	// StatusPending is a per-type status only: sent, awaiting its ACK for
	// less than StaleAfter. A proxy with pending types is still SYNCED.
	StatusPending = "PENDING"
)

// ProxyStatus is one connected xDS stream as /v1/proxies shows it.
type ProxyStatus struct {
	NodeID string `json:"node_id"`
	// NodeCluster is node.cluster, the key the proxy's snapshot is served
	// under; Group is the policy proxy group it resolves to ("" if none:
	// shared clusters and endpoints only).
	NodeCluster string `json:"node_cluster"`
	Group       string `json:"group,omitempty"`
	// GroupError is set while the proxy's group failed its last
	// translation: it keeps its last good listeners and routes.
	GroupError string `json:"group_error,omitempty"`
	// UserAgent is node.user_agent_name and its version, e.g.
	// "envoy/1.31.0" or "grpc-go/1.66.0".
	UserAgent      string    `json:"user_agent,omitempty"`
	RemoteAddress  string    `json:"remote_address,omitempty"`
	ConnectedSince time.Time `json:"connected_since"`
	// Stream identifies the stream: "sotw-N" or "delta-N".
	Stream string `json:"stream"`
	// Kind is "ADS", "ADS delta", or a per-type stream such as "CDS" or
	// "CDS delta".
	Kind string `json:"kind"`
	// Status is derived from Types: NACKED, STALE, NOT_SENT or SYNCED.
	Status string `json:"status"`
	// Types is keyed by the short type name (CDS, EDS, LDS, RDS).
	Types map[string]*TypeStatus `json:"types"`
	// Sidecar is set for a Connect sidecar (sidecar.go): its destination
	// and upstreams, or why its node id is not served as one.
	Sidecar *SidecarStatus `json:"sidecar,omitempty"`
	// EnvoyVersion is the Envoy release the node announces (major.minor);
	// Downgraded, what an Envoy that old is served differently from the
	// newest: each feature rewritten to its older form or left out
	// (compat.go).
	EnvoyVersion string   `json:"envoy_version,omitempty"`
	Downgraded   []string `json:"downgraded,omitempty"`
	// RelayedEnvoys, on a per-VM agent's relay stream, are the Envoys the
	// agent relays this stream's config to, as "NODE-ID@VERSION" (as the
	// agent reports them: relayed.go).
	RelayedEnvoys []string `json:"relayed_envoys,omitempty"`

	key string // snapshot key the proxy is served from
}

// TypeStatus is the protocol state of one resource type on one stream.
type TypeStatus struct {
	TypeURL string `json:"type_url"`
	// Status is SYNCED, PENDING, STALE, NACKED or NOT_SENT.
	Status      string    `json:"status"`
	VersionSent string    `json:"version_sent,omitempty"`
	NonceSent   string    `json:"nonce_sent,omitempty"`
	SentAt      time.Time `json:"sent_at,omitzero"`
	// VersionAcked is the last version the proxy ACKed on this stream, or
	// the version it announced holding when the stream opened.
	VersionAcked string    `json:"version_acked,omitempty"`
	AckedAt      time.Time `json:"acked_at,omitzero"`
	// VersionCurrent is the version the bridge currently serves this
	// proxy's node.cluster, to compare with the two above.
	VersionCurrent string `json:"version_current,omitempty"`
	// LastNACK is the most recent rejection on this stream, kept after a
	// later ACK for reference; Status says whether it is still current.
	LastNACK *NACKInfo `json:"last_nack,omitempty"`
}

// NACKInfo is one rejected response.
type NACKInfo struct {
	// Version is the version that was rejected (the one sent with Nonce),
	// not the version_info the request carried (the previous good one).
	Version string `json:"version"`
	Nonce   string `json:"nonce"`
	// Error is the proxy's error text, cut at maxNACKText bytes;
	// ErrorBytes is its full length.
	Error      string    `json:"error"`
	ErrorBytes int       `json:"error_bytes"`
	At         time.Time `json:"at"`
}

// Bounds on what a client makes the bridge keep, log or show: each is
// refused (or cut) rather than trusted.
const (
	// maxNACKText cuts a NACK's error text in logs and /v1/proxies; Envoy's
	// own messages are a few hundred bytes.
	maxNACKText = 4 << 10
	// maxNodeBytes bounds a node's encoding (metadata included), which
	// every stream keeps for its life.
	maxNodeBytes = 64 << 10
	// maxTypeURLBytes bounds a requested type URL: the ones Envoy uses are
	// under 80 bytes.
	maxTypeURLBytes = 256
)

// truncate cuts s to n bytes (on a rune boundary), marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…[cut]"
}

// maxTypesPerStream bounds the per-type state a client can make us keep
// by asking for made-up type URLs.
const maxTypesPerStream = 16

// Resource names a stream subscribes to are kept in its subscription for
// the stream's life (delta subscriptions accumulate over requests), so
// they are bounded too: one name (ours are a service name and a subset)
// and all of a stream's names together (an Envoy holding 50,000 clusters
// asks for about 2 MiB of EDS names).
const (
	maxResourceNameBytes  = 4 << 10
	maxNameBytesPerStream = 16 << 20
)

// nameUpdate is the subscription change a request makes: a SotW request
// replaces a type's names with add (replace set), a delta request adds and
// removes.
type nameUpdate struct {
	replace     bool
	add, remove []string
}

// tracker keeps the protocol state of every live stream, fed by the
// callbacks. Memory is one entry per live stream, dropped on close.
type tracker struct {
	mu      sync.Mutex
	streams map[streamKey]*streamState
	opened  uint64 // streams opened since the tracker began
	// epoch is what stamps count from (monotonic).
	epoch time.Time
	// expect holds, by snapshot key, the endpoints a make-before-break
	// step waits for every stream of the key to receive (staging.go).
	expect map[string]*expectation
	// nodes counts, by node id, the streams whose node is known: whether
	// a closing stream was its node's last is a lookup, where a scan of
	// every stream made a fleet's disconnect quadratic, under the lock
	// every request takes.
	nodes map[string]int32
}

// expectation is a set of ClusterLoadAssignment names.
type expectation struct {
	names map[string]bool
}

type streamState struct {
	key     streamKey
	typeURL string // the stream's type, "" for ADS
	kind    string
	// remote is the peer's address as the connection holds it, formatted
	// when read: a string made per stream was a small object kept for its
	// life, made among a connect's garbage.
	remote   net.Addr
	openedAt time.Time
	node     *corev3.Node
	types    typeStates
	// nameBytes sums the types' nameBytes.
	nameBytes int
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

func newTracker() *tracker {
	return &tracker{streams: map[streamKey]*streamState{}, expect: map[string]*expectation{}, nodes: map[string]int32{}, epoch: time.Now()}
}

// streamKind names a stream by its protocol and the type URL it was opened
// for ("" for ADS).
func streamKind(delta bool, typeURL string) string {
	switch {
	case typeURL == "" && delta:
		return "ADS delta" // a constant: not a string made per stream
	case typeURL == "":
		return "ADS"
	case delta:
		return shortType(typeURL) + " delta"
	}
	return shortType(typeURL)
}

var shortTypes = map[string]string{
	resourcev3.ClusterType:  "CDS",
	resourcev3.EndpointType: "EDS",
	resourcev3.ListenerType: "LDS",
	resourcev3.RouteType:    "RDS",
	resourcev3.SecretType:   "SDS",
	resourcev3.RuntimeType:  "RTDS",
}

// canonicalType is typeURL as the package's constant of a type with a
// short name (the same bytes), or typeURL itself for any other.
//
// Why: every stream keys its per-type state (here and its watches) by
// type URL, and a key kept from a decoded request is that stream's own
// copy. Comparing with it on each push and ACK reads a cache line of the
// stream's own, once per proxy per change; a key that is the shared
// constant is in the cache already. String-keyed map lookups went from
// 5.9–7.4 % of S2's profile to 3.4–5.2 % (bench/README.md).
func canonicalType(typeURL string) string {
	if i, ok := shortTypeNumbers[typeURL]; ok {
		return shortTypeURLs[i-1]
	}
	return typeURL
}

// shortTypeURLs are the type URLs with a short name (shortTypes' keys, the
// package's constants), sorted; shortTypeNumbers numbers them from 1. A
// history slot keeps a type as its number, and canonicalType hands out
// the constant.
var shortTypeURLs, shortTypeNumbers = func() ([]string, map[string]uint8) {
	urls := slices.Sorted(maps.Keys(shortTypes))
	numbers := make(map[string]uint8, len(urls))
	for i, u := range urls {
		numbers[u] = uint8(i + 1)
	}
	return urls, numbers
}()

// shortType is the xDS service name of a type URL, or the type URL itself
// for types without one.
func shortType(typeURL string) string {
	if s, ok := shortTypes[typeURL]; ok {
		return s
	}
	return typeURL
}

func (t *tracker) open(key streamKey, typeURL string, addr net.Addr) {
	st := &streamState{key: key, typeURL: typeURL, kind: streamKind(key.delta, typeURL), remote: addr, openedAt: time.Now()}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.streams[key] = st
	t.opened++
}

// close forgets a stream and returns what it knew (nil if unknown).
func (t *tracker) close(key streamKey) *streamState {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.streams[key]
	delete(t.streams, key)
	if st != nil {
		t.forgetNodeLocked(st)
	}
	return st
}

// forgetNodeLocked drops st's node from the count (t.mu held).
func (t *tracker) forgetNodeLocked(st *streamState) {
	if st.node == nil {
		return
	}
	id := st.node.GetId()
	if t.nodes[id] <= 1 {
		delete(t.nodes, id)
		return
	}
	t.nodes[id]--
}

// hasNode reports whether a stream of node id is open (and has sent its
// node).
func (t *tracker) hasNode(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nodes[id] > 0
}

// reqKind classifies a request for a type.
type reqKind int

const (
	reqInitial reqKind = iota // no response_nonce: a new subscription
	reqStale                  // nonce of an older response: ignored
	reqACK                    // first ACK of the last response
	reqNACK                   // first NACK of the last response
	reqRepeat                 // same nonce again: subscription change, repeated ACK/NACK
	reqUnknown                // unknown stream
	reqRefused                // beyond a bound, or another node: the stream ends
)

type reqResult struct {
	kind reqKind
	// node is the stream's node (requests after the first may omit it);
	// newNode is set on the request that made it known.
	node    *corev3.Node
	newNode bool
	kindStr string
	// version is the version ACKed or NACKed (the one sent with the nonce).
	version string
	// refused says why a reqRefused request is refused.
	refused string
}

// request records a request.
func (t *tracker) request(now time.Time, key streamKey, node *corev3.Node, typeURL, version, nonce, errDetail string, names nameUpdate) reqResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.streams[key]
	if st == nil {
		return reqResult{kind: reqUnknown, node: node}
	}
	res := reqResult{kindStr: st.kind}
	refuse := func(why string) reqResult {
		res.kind, res.refused = reqRefused, why
		return res
	}
	switch {
	case len(typeURL) > maxTypeURLBytes:
		return refuse(fmt.Sprintf("type URL of %d bytes is over the limit of %d", len(typeURL), maxTypeURLBytes))
	case st.node == nil && node != nil && proto.Size(node) > maxNodeBytes:
		return refuse(fmt.Sprintf("node of %d bytes (metadata included) is over the limit of %d", proto.Size(node), maxNodeBytes))
	case st.node != nil && node != nil && cache.Key(node) != cache.Key(st.node), st.node != nil && node != nil && node.GetId() != st.node.GetId():
		// A stream is one proxy: a new identity would be a new snapshot
		// key per request, kept for the stream's life.
		return refuse(fmt.Sprintf("node %q in %q cannot become node %q in %q within a stream", st.node.GetId(), st.node.GetCluster(), node.GetId(), node.GetCluster()))
	}
	if st.node == nil && node != nil {
		st.node, res.newNode = node, true
		t.nodes[node.GetId()]++
	}
	res.node = st.node
	ts := st.types.get(typeURL)
	if ts == nil {
		if len(st.types) >= maxTypesPerStream {
			return refuse(fmt.Sprintf("more than %d type URLs on one stream", maxTypesPerStream))
		}
		ts = st.types.add(typeURL)
	}
	if why := st.subscribe(ts, names); why != "" {
		return refuse(why)
	}
	switch {
	case nonce == "":
		res.kind = reqInitial
		// A SotW client reconnecting says which version it holds.
		if version != "" && ts.sentNonce == "" {
			ts.ackedVersion, ts.ackedAt = version, t.stamp(now)
		}
		return res
	case nonce != ts.sentNonce:
		// Not the latest response: the protocol says to ignore it, and
		// the SotW server does (sotw.go).
		res.kind = reqStale
		return res
	}
	res.version = ts.sentVersion
	// From here nonce is the sent nonce.
	switch {
	case errDetail != "":
		res.kind = reqRepeat
		if !ts.nacked {
			res.kind = reqNACK
			ts.nacked = true
			// The sent string, not the request's copy of it.
			ts.lastNACK = &NACKInfo{Version: ts.sentVersion, Nonce: ts.sentNonce, Error: truncate(errDetail, maxNACKText), ErrorBytes: len(errDetail), At: now}
		}
	case ts.nacked:
		// After a NACK, SotW requests for the type (e.g. a subscription
		// change) keep the rejected response's nonce and the old version.
		res.kind = reqRepeat
	case key.delta || version == ts.sentVersion:
		res.kind = reqRepeat
		if !ts.acked {
			res.kind = reqACK
			ts.ackedVersion, ts.acked, ts.ackedAt = ts.sentVersion, true, t.stamp(now)
		}
	default:
		// Latest nonce, no error, another version: not an ACK of what we
		// sent. Leave the state as it is.
		res.kind = reqRepeat
	}
	return res
}

// subscribe accounts for a request's names, or says why they are refused.
func (st *streamState) subscribe(ts *typeState, u nameUpdate) string {
	size := func(names []string) (int, string) {
		n := 0
		for _, name := range names {
			if len(name) > maxResourceNameBytes {
				return 0, fmt.Sprintf("resource name of %d bytes is over the limit of %d", len(name), maxResourceNameBytes)
			}
			n += len(name)
		}
		return n, ""
	}
	add, why := size(u.add)
	if why != "" {
		return why
	}
	remove, _ := size(u.remove)
	next := max(int(ts.nameBytes)+add-remove, 0)
	if u.replace {
		next = add
	}
	if total := st.nameBytes - int(ts.nameBytes) + next; total > maxNameBytesPerStream {
		return fmt.Sprintf("resource names of %d bytes on one stream are over the limit of %d", total, maxNameBytesPerStream)
	}
	st.nameBytes += next - int(ts.nameBytes)
	ts.nameBytes = int32(next) // at most maxNameBytesPerStream
	return ""
}

// response records a response about to be sent; it returns the stream's
// node (nil if not known yet).
func (t *tracker) response(now time.Time, key streamKey, typeURL, version, nonce string, resources int, names func() []string) *corev3.Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.streams[key]
	if st == nil {
		return nil
	}
	ts := st.types.get(typeURL)
	if ts == nil {
		if len(st.types) >= maxTypesPerStream {
			return st.node
		}
		ts = st.types.add(typeURL)
	}
	ts.sentVersion, ts.sentNonce, ts.sentAt, ts.sentResources = version, nonce, t.stamp(now), int32(min(resources, math.MaxInt32))
	ts.acked, ts.nacked = false, false
	if typeURL == resourcev3.EndpointType && st.node != nil && names != nil {
		if e := t.expect[cache.Key(st.node)]; e != nil {
			if ts.got == nil {
				ts.got = map[string]bool{}
			}
			for _, n := range names() {
				if e.names[n] {
					ts.got[n] = true
				}
			}
		}
	}
	return st.node
}

// streamType returns the type URL a stream was opened for, "" for ADS.
func (t *tracker) streamType(key streamKey) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.streams[key]; st != nil {
		return st.typeURL
	}
	return ""
}

// nodeCluster finds the node.cluster of a connected node id.
func (t *tracker) nodeCluster(nodeID string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var best *streamState
	for _, st := range t.streams {
		if st.node == nil || st.node.GetId() != nodeID {
			continue
		}
		if best == nil || compareKeys(st.key, best.key) < 0 {
			best = st
		}
	}
	if best == nil {
		return "", false
	}
	// The snapshot key, so a proxyless gRPC node's dump shows its API
	// listeners rather than what an Envoy of the same node.cluster gets.
	return cache.Key(best.node), true
}

func compareKeys(a, b streamKey) int {
	if a.delta != b.delta {
		if a.delta {
			return 1
		}
		return -1
	}
	return cmp.Compare(a.id, b.id)
}

func (k streamKey) String() string {
	if k.delta {
		return "delta-" + strconv.FormatInt(k.id, 10)
	}
	return "sotw-" + strconv.FormatInt(k.id, 10)
}

// streams returns how many streams are open and how many opened since
// the tracker began.
func (t *tracker) streamCounts() (open int, opened uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.streams), t.opened
}

// count is the number of streams snapshot would list, without building
// their statuses.
func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.streams)
}

// snapshot returns the status of every stream, sorted by node id then
// stream, with statuses derived at now; Group and VersionCurrent are left
// for the Server to fill in.
func (t *tracker) snapshot(now time.Time, staleAfter time.Duration) []ProxyStatus {
	t.mu.Lock()
	out := make([]ProxyStatus, 0, len(t.streams))
	for _, st := range t.streams {
		p := ProxyStatus{
			NodeID:         st.node.GetId(),
			NodeCluster:    st.node.GetCluster(),
			key:            cache.Key(st.node),
			UserAgent:      userAgent(st.node),
			EnvoyVersion:   envoyVersion(st.node),
			RelayedEnvoys:  relayedEnvoys(st.node),
			RemoteAddress:  addrString(st.remote),
			ConnectedSince: st.openedAt,
			Stream:         st.key.String(),
			Kind:           st.kind,
			Types:          make(map[string]*TypeStatus, len(st.types)),
		}
		for i := range st.types {
			ts := &st.types[i]
			typ := ts.url
			s := &TypeStatus{
				TypeURL:      typ,
				Status:       ts.status(now.Sub(t.time(ts.sentAt)), staleAfter),
				VersionSent:  ts.sentVersion,
				NonceSent:    ts.sentNonce,
				SentAt:       t.time(ts.sentAt),
				VersionAcked: ts.ackedVersion,
				AckedAt:      t.time(ts.ackedAt),
			}
			if ts.lastNACK != nil {
				n := *ts.lastNACK
				s.LastNACK = &n
			}
			p.Types[shortType(typ)] = s
		}
		p.Status = proxyStatus(p.Types)
		out = append(out, p)
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b ProxyStatus) int {
		if c := strings.Compare(a.NodeID, b.NodeID); c != 0 {
			return c
		}
		return compareStreams(a.Stream, b.Stream)
	})
	return out
}

// compareStreams orders "sotw-N" before "delta-N", each by N.
func compareStreams(a, b string) int {
	ka, kb := parseStream(a), parseStream(b)
	return compareKeys(ka, kb)
}

func parseStream(s string) streamKey {
	kind, n, _ := strings.Cut(s, "-")
	id, _ := strconv.ParseInt(n, 10, 64)
	return streamKey{delta: kind == "delta", id: id}
}

// proxyStatus derives a proxy's status from its types: NACKED if any type
// stands rejected, else STALE if any is unACKed for too long, else
// NOT_SENT if nothing was sent, else SYNCED.
func proxyStatus(types map[string]*TypeStatus) string {
	has := map[string]bool{}
	for _, ts := range types {
		has[ts.Status] = true
	}
	switch {
	case has[StatusNACKed]:
		return StatusNACKed
	case has[StatusStale]:
		return StatusStale
	case !has[StatusSynced] && !has[StatusPending]:
		return StatusNotSent
	}
	return StatusSynced
}
