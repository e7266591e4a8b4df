package serve

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
)

// Connect sidecars are known by node id, as with Consul's own xDS server:
// an Envoy whose node.id is a registered connect-proxy's service id is
// served that sidecar's group (ir.SidecarGroupName), whatever node.cluster
// it announces. The rest of the server keys proxies by node.cluster, so
// this file rewrites the node.cluster of a sidecar's requests to its
// group's name as they arrive (one key per stream, fixed when its node is
// first seen), and refuses clients that announce a sidecar group's name
// themselves. A stream keyed before its registration appeared, or whose
// registration changed or vanished, is closed with Unavailable once the
// new translation is served (SetSidecars after Update): Envoy reconnects
// at once and is keyed afresh, instead of staying on a wrong world.

// ConsulNodeMetadata is the node metadata key (a string) that picks the
// Consul node of a proxy id registered on several nodes.
const ConsulNodeMetadata = xds.ConsulNodeMetadata

// SidecarInfo is one registered sidecar, for keying and /v1/proxies.
type SidecarInfo struct {
	// Node is the Consul node (with the proxy id, it names the sidecar's
	// group: Group).
	Node string `json:"consul_node"`
	// Service is the destination service; Upstreams "SERVICE@ADDR:PORT".
	Service   string   `json:"destination"`
	Upstreams []string `json:"upstreams,omitempty"`
	// Kind is a gateway's ("terminating-gateway", "mesh-gateway"); ""
	// for a sidecar. A gateway's Service is its own name.
	Kind string `json:"kind,omitempty"`
}

// Group is the name of the group serving proxyID's registration on
// i.Node.
func (i SidecarInfo) Group(proxyID string) string { return ir.SidecarGroupName(i.Node, proxyID) }

// SameSidecarIndex reports whether two indexes (by proxy id) say the same.
func SameSidecarIndex(a, b map[string][]SidecarInfo) bool {
	return maps.EqualFunc(a, b, func(x, y []SidecarInfo) bool {
		return slices.EqualFunc(x, y, func(p, q SidecarInfo) bool {
			return p.Node == q.Node && p.Service == q.Service && p.Kind == q.Kind && slices.Equal(p.Upstreams, q.Upstreams)
		})
	})
}

// SidecarStatus is what /v1/proxies shows of a sidecar proxy.
type SidecarStatus struct {
	SidecarInfo
	// Error says why a node id that is a registered proxy id is not
	// served as a sidecar (registered on several nodes, none chosen).
	Error string `json:"error,omitempty"`
}

type sidecars struct {
	log zerolog.Logger

	// ready is closed by the first SetSidecars. wait (ServerConfig.
	// Sidecars) turns keying on; streams are keyed only once ready
	// (before it nothing is served anyway), so a sidecar connecting at
	// start is not keyed, served and closed at once.
	ready     chan struct{}
	readyOnce sync.Once
	wait      bool
	// authorize is authorize_nodes: a sidecar's certificate must name
	// its service (sidecarAuthorized).
	authorize bool

	mu      sync.Mutex
	index   map[string][]SidecarInfo // by proxy id, sorted by node
	streams map[*sidecarStream]bool
	warned  map[string]bool
}

func newSidecars(log zerolog.Logger, wait bool) *sidecars {
	return &sidecars{log: log, wait: wait, ready: make(chan struct{}), index: map[string][]SidecarInfo{}, streams: map[*sidecarStream]bool{}, warned: map[string]bool{}}
}

// SetSidecars replaces the registered sidecars by proxy id. Call it after
// the Update that serves their groups: streams whose key it changes are
// closed, and reconnect to what that Update serves.
func (s *Server) SetSidecars(index map[string][]SidecarInfo) {
	s.sidecars.set(index)
}

func (sc *sidecars) set(index map[string][]SidecarInfo) {
	idx := make(map[string][]SidecarInfo, len(index))
	for id, infos := range index {
		infos = slices.Clone(infos)
		slices.SortFunc(infos, func(a, b SidecarInfo) int { return strings.Compare(a.Node, b.Node) })
		idx[id] = infos
	}
	defer sc.readyOnce.Do(func() { close(sc.ready) })
	sc.mu.Lock()
	defer sc.mu.Unlock()
	// The central bridge sets the index after every build; streams are
	// keyed against it, so an unchanged one leaves every key as it is and
	// a build need not look at every stream.
	if sc.index != nil && SameSidecarIndex(sc.index, idx) {
		return
	}
	sc.index = idx
	for st := range sc.streams {
		if !st.keyed {
			continue
		}
		key, _, _ := sc.keyLocked(st.nodeID, st.consulNode, st.announced)
		if key != st.key {
			sc.log.Info().Str("node", st.nodeID).Str("was", st.key).Str("now", key).
				Msg("Connect sidecar registration changed; closing the stream so the proxy reconnects to its new group")
			st.close(status.Errorf(codes.Unavailable, "the Connect sidecar registration of node %q changed (now served as %q); reconnect", st.nodeID, key))
		}
	}
}

// keyLocked is the node.cluster a node is served under: its sidecar
// group, or what it announced.
func (sc *sidecars) keyLocked(nodeID, consulNode, announced string) (string, *SidecarInfo, string) {
	infos := sc.index[nodeID]
	if consulNode != "" {
		infos = slices.DeleteFunc(slices.Clone(infos), func(i SidecarInfo) bool { return i.Node != consulNode })
	}
	switch len(infos) {
	case 0:
		return announced, nil, ""
	case 1:
		return infos[0].Group(nodeID), &infos[0], ""
	}
	nodes := make([]string, len(infos))
	for i, in := range infos {
		nodes[i] = in.Node
	}
	msg := "proxy id " + nodeID + " is registered on Consul nodes " + strings.Join(nodes, ", ") +
		"; set node metadata " + ConsulNodeMetadata + " to the proxy's Consul node"
	// An unknown group: the proxy gets what nodes in no group get,
	// never one of the sidecars' identities.
	return ir.SidecarGroupPrefix + "?ambiguous/" + nodeID, nil, msg
}

// status is the sidecar part of a /v1/proxies entry, nil for other nodes.
func (sc *sidecars) status(nodeID, key string) *SidecarStatus {
	key = cache.BaseKey(key) // an older Envoy's key carries its class
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, in := range sc.index[nodeID] {
		if in.Group(nodeID) == key {
			return &SidecarStatus{SidecarInfo: in}
		}
	}
	if strings.HasPrefix(key, ir.SidecarGroupPrefix+"?ambiguous/") {
		_, _, msg := sc.keyLocked(nodeID, "", "")
		return &SidecarStatus{Error: msg}
	}
	return nil
}

// sidecarStream is one xDS stream's keying state.
type sidecarStream struct {
	grpc.ServerStream
	sc *sidecars

	// Set once, under sc.mu, when the first node arrives.
	keyed                         bool
	nodeID, consulNode, announced string
	key                           string
	// keyedNode is received, the last node a request carried, keyed: a
	// stream's requests carry the same node (package cache's nodememo.go), so it is
	// copied once.
	received, keyedNode *corev3.Node

	// ctx is the stream's context as the handler sees it: close ends it,
	// with why as its cause, and ends the gRPC stream with why as its
	// status, which wakes the handler's blocked read (streamend.go).
	ctx   context.Context
	close context.CancelCauseFunc
}

func (st *sidecarStream) Context() context.Context { return st.ctx }

// closedErr is why close ended the stream, nil if it did not (the
// stream's own end has no cause of its own).
func (st *sidecarStream) closedErr() error {
	if err := st.ctx.Err(); err != nil {
		if cause := context.Cause(st.ctx); cause != err {
			return cause
		}
	}
	return nil
}

// sidecarInterceptor keys every xDS stream's node (see above). It must
// run inside firstRequestInterceptor, so it sees the replayed first
// request like any other.
func (sc *sidecars) interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !strings.HasPrefix(info.FullMethod, "/envoy.service.") {
			return handler(srv, ss)
		}
		ctx, cancel := context.WithCancelCause(ss.Context())
		// Closing also ends the gRPC stream with why, which wakes a
		// handler blocked in a read (streamend.go).
		closeStream := func(err error) { cancel(err); endStream(ss.Context(), status.Convert(err)) }
		st := &sidecarStream{ServerStream: ss, sc: sc, ctx: ctx, close: closeStream}
		defer func() {
			sc.mu.Lock()
			delete(sc.streams, st)
			sc.mu.Unlock()
			cancel(nil)
		}()
		err := handler(srv, st)
		if cerr := st.closedErr(); cerr != nil {
			return cerr
		}
		return err
	}
}

func (st *sidecarStream) RecvMsg(m any) error {
	if err := st.ServerStream.RecvMsg(m); err != nil {
		if cerr := st.closedErr(); cerr != nil {
			return cerr
		}
		return err
	}
	node := cache.RequestNode(m)
	if node != nil {
		if st.sc.wait && !st.keyed {
			select {
			case <-st.sc.ready:
			case <-st.ctx.Done():
				if cerr := st.closedErr(); cerr != nil {
					return cerr
				}
				return st.ctx.Err()
			}
		}
		keyed, err := st.keyNode(node)
		if err != nil {
			st.close(err)
			return err
		}
		cache.SetNode(m, keyed)
	}
	return nil
}

// keyNode returns the node to serve the request as: node with its
// cluster set to the stream's key, which is fixed at the first node the
// stream sends. node itself is left as it is: a stream's requests share
// the node they carry (package cache's nodememo.go), and the tracker and authorization
// keep it.
func (st *sidecarStream) keyNode(node *corev3.Node) (*corev3.Node, error) {
	sc := st.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if !st.keyed {
		if strings.HasPrefix(node.GetCluster(), ir.SidecarGroupPrefix) {
			return nil, status.Errorf(codes.PermissionDenied, "node.cluster %q: names starting with %q are reserved for Connect sidecars, which are known by their node id (the proxy's service id)", node.GetCluster(), ir.SidecarGroupPrefix)
		}
		st.keyed = true
		st.nodeID, st.announced = node.GetId(), node.GetCluster()
		st.consulNode = node.GetMetadata().GetFields()[ConsulNodeMetadata].GetStringValue()
		var msg string
		var info *SidecarInfo
		st.key, info, msg = sc.keyLocked(st.nodeID, st.consulNode, st.announced)
		// Authorization ran before this lookup (authzInterceptor): the
		// registration may have come or gone since, so what the stream
		// is keyed to is judged again here, either way round.
		if info != nil && sc.authorize {
			if cert := peerCert(st.Context()); !sidecarAuthorized(cert, info) {
				sc.log.Warn().Str("node", st.nodeID).Str("service", info.Service).Str("certificate", certIdentity(cert)).
					Msg("refused Connect sidecar: certificate does not name its service")
				return nil, status.Errorf(codes.PermissionDenied, "certificate %s does not authorize node %q%s", certIdentity(cert), st.nodeID, sidecarRefusal(info))
			}
		}
		if info == nil && sc.authorize && msg == "" {
			if cert := peerCert(st.Context()); !authorized(cert, node) {
				sc.log.Warn().Str("node", st.nodeID).Str("group", st.announced).Str("certificate", certIdentity(cert)).
					Msg("refused xDS client: certificate does not authorize this node (its sidecar registration went away)")
				return nil, status.Errorf(codes.PermissionDenied, "certificate %s does not authorize node %q in group %q", certIdentity(cert), st.nodeID, st.announced)
			}
		}
		if msg != "" && !sc.warned[st.nodeID] {
			if len(sc.warned) > maxRemembered {
				clear(sc.warned)
			}
			sc.warned[st.nodeID] = true
			sc.log.Warn().Str("node", st.nodeID).Str("problem", msg).Msg("ambiguous Connect sidecar: not served as a sidecar")
		}
		sc.streams[st] = true
	}
	// A node that announces another cluster later is left as it is, so
	// the tracker refuses the change as for any proxy.
	if node.GetCluster() != st.announced || node.GetCluster() == st.key {
		return node, nil
	}
	if node != st.received {
		st.received, st.keyedNode = node, proto.Clone(node).(*corev3.Node)
		st.keyedNode.Cluster = st.key
	}
	return st.keyedNode, nil
}

// restKey is the snapshot key of a REST poll's node, as a stream's but
// looked up on every poll (no stream outlives a registration change), and
// the sidecar registration it stands for (nil for other nodes), from the
// one lookup authorization must judge.
func (sc *sidecars) restKey(node *corev3.Node) (string, *SidecarInfo, error) {
	if !sc.wait {
		return cache.Key(node), nil, nil
	}
	if strings.HasPrefix(node.GetCluster(), ir.SidecarGroupPrefix) {
		return "", nil, fmt.Errorf("node.cluster %q: names starting with %q are reserved for Connect sidecars, which are known by their node id: %w", node.GetCluster(), ir.SidecarGroupPrefix, errReservedCluster)
	}
	n := proto.Clone(node).(*corev3.Node)
	sc.mu.Lock()
	var info *SidecarInfo
	n.Cluster, info, _ = sc.keyLocked(n.GetId(), n.GetMetadata().GetFields()[ConsulNodeMetadata].GetStringValue(), n.GetCluster())
	if info != nil {
		info = new(*info) // sc.index may change once the lock is let go
	}
	sc.mu.Unlock()
	return cache.Key(n), info, nil
}

// errReservedCluster: a client announced a sidecar group's name itself.
var errReservedCluster = errors.New("reserved node.cluster")

// sidecarAuthorized: under authorize_nodes the node.cluster a sidecar
// announces proves nothing, since it is served by node id and its group
// carries its service's identity (in central mode, the leaf and key). So
// its certificate must name that service: a URI SAN ending in
// /svc/SERVICE (the service's Connect leaf, or any SPIFFE id of that
// form) or one that authorizes node.cluster SERVICE (/group/SERVICE).
func sidecarAuthorized(cert *x509.Certificate, info *SidecarInfo) bool {
	if cert == nil {
		return false
	}
	for _, u := range cert.URIs {
		if strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/svc/"+info.Service) ||
			uriAuthorizes(u, &corev3.Node{Cluster: info.Service}) {
			return true
		}
	}
	return false
}

// lookup is the registered sidecar a node is, nil if none (or sidecar
// keying is off, or the registrations are not known yet).
func (sc *sidecars) lookup(node *corev3.Node) *SidecarInfo {
	if !sc.wait {
		return nil
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	_, info, _ := sc.keyLocked(node.GetId(), node.GetMetadata().GetFields()[ConsulNodeMetadata].GetStringValue(), node.GetCluster())
	return info
}
