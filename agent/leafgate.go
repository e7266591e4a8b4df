package agent

import (
	"slices"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// leafGate sees every local xDS stream (the local server's innermost
// interceptor, so sidecars are already keyed): it refuses a stream whose
// key acts for a connect service unless its socket peer is allowed for
// it (leafaccess.go), refuses a key the central bridge refuses, counts
// requests by name for a leaf the stream's key does not act for, and
// holds the streams by key so the agent can end them with a reason.
type leafGate struct {
	a *Agent

	mu      sync.Mutex
	streams map[string]map[*gatedStream]bool // by key
	// warned bounds the "asked for another leaf" warnings: once per key
	// and name, starting over past maxWarned (clients choose both).
	warned map[string]bool

	refusals *prometheus.CounterVec
}

const maxWarned = 1000

// Reasons on consul_xds_bridge_agent_leaf_refusals_total.
const (
	refusedNotActing = "not_acting_for_service" // asked by name for another service's leaf
	refusedPeer      = "peer_not_allowed"       // uid/gid not allowed for the key's service
	refusedNoPeer    = "no_peer_credentials"    // TCP, or credentials unreadable
)

func newLeafGate(a *Agent, reg prometheus.Registerer) *leafGate {
	g := &leafGate{a: a, streams: map[string]map[*gatedStream]bool{}, warned: map[string]bool{},
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "consul_xds_bridge_agent_leaf_refusals_total",
			Help: "Connect leaf requests refused by the agent, by reason: a leaf asked for by name by a proxy not acting for its service, or a stream acting for a service from a socket peer not allowed for it."},
			[]string{"reason"}),
	}
	for _, r := range []string{refusedNotActing, refusedPeer, refusedNoPeer} {
		g.refusals.WithLabelValues(r) // from zero, so rate() works at the first refusal
	}
	reg.MustRegister(g.refusals)
	return g
}

// gatedStream is one local stream.
type gatedStream struct {
	grpc.ServerStream
	g        *leafGate
	cred     PeerCred
	socket   bool     // came through the Unix socket with credentials
	key      string   // fixed at its first node
	services []string // the connect services key acts for
	// counted are the leaf names this stream was counted for: a SotW
	// client repeats its names in every request (each ACK), which must
	// not count again.
	counted map[string]bool
}

func (g *leafGate) interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !strings.HasPrefix(info.FullMethod, "/envoy.service.") {
			return handler(srv, ss)
		}
		st := &gatedStream{ServerStream: ss, g: g}
		if p, ok := peer.FromContext(ss.Context()); ok {
			st.cred, st.socket = peerOf(p.Addr)
		}
		defer g.forget(st)
		return handler(srv, st)
	}
}

func (st *gatedStream) RecvMsg(m any) error {
	if err := st.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	var node *corev3.Node
	var typeURL string
	var names []string
	switch r := m.(type) {
	case *discoveryv3.DiscoveryRequest:
		node, typeURL, names = r.GetNode(), r.GetTypeUrl(), r.GetResourceNames()
	case *discoveryv3.DeltaDiscoveryRequest:
		node, typeURL, names = r.GetNode(), r.GetTypeUrl(), r.GetResourceNamesSubscribe()
	}
	if node != nil && st.key == "" {
		if err := st.g.admit(st, serve.KeyOf(node).Key); err != nil {
			serve.EndStream(st.Context(), err)
			return err
		}
	}
	if typeURL == resourcev3.SecretType {
		st.g.checkNames(st, names)
	}
	return nil
}

// admit fixes a stream's key and vets it.
func (g *leafGate) admit(st *gatedStream, key string) error {
	a := g.a
	if why := a.relayRefused(key); why != "" {
		return status.Error(codes.PermissionDenied, why)
	}
	services := a.leafServices(key)
	for _, svc := range services {
		if err := a.peerAllowed(svc, st.cred, st.socket); err != nil {
			reason := refusedPeer
			if !st.socket {
				reason = refusedNoPeer
			}
			g.refusals.WithLabelValues(reason).Inc()
			a.log.Warn().Str("node_cluster", serve.ParseRelayKey(key).NodeCluster).Str("service", svc).Bool("unix_socket", st.socket).
				Uint32("uid", st.cred.UID).Uint32("gid", st.cred.GID).Int32("pid", st.cred.PID).Str("reason", reason).
				Msg("refused a local proxy acting for a Connect service: its peer may not get that service's private key")
			return status.Errorf(codes.PermissionDenied, "node.cluster %q: %v", serve.ParseRelayKey(key).NodeCluster, err)
		}
	}
	g.mu.Lock()
	st.key, st.services = key, services // under mu: recheck reads them
	if g.streams[key] == nil {
		g.streams[key] = map[*gatedStream]bool{}
	}
	g.streams[key][st] = true
	g.mu.Unlock()
	return nil
}

// checkNames counts the leaves a stream asks for that its key does not
// act for: the key's resources do not hold them, so it gets nothing.
func (g *leafGate) checkNames(st *gatedStream, names []string) {
	for _, n := range names {
		svc, ok := strings.CutPrefix(n, LeafSecretPrefix)
		if !ok || slices.Contains(st.services, svc) || st.counted[n] {
			continue
		}
		if st.counted == nil || len(st.counted) >= maxWarned {
			st.counted = map[string]bool{}
		}
		st.counted[n] = true
		g.refusals.WithLabelValues(refusedNotActing).Inc()
		g.mu.Lock()
		k := st.key + "\x00" + n
		first := !g.warned[k]
		if first {
			if len(g.warned) >= maxWarned {
				clear(g.warned)
			}
			g.warned[k] = true
		}
		g.mu.Unlock()
		if first {
			g.a.log.Warn().Str("node_cluster", serve.ParseRelayKey(st.key).NodeCluster).Str("secret", n).Strs("acts_for", st.services).
				Uint32("uid", st.cred.UID).Int32("pid", st.cred.PID).
				Msg("a local proxy asked for the Connect leaf of a service it does not act for; it gets nothing (logged once per group and name)")
		}
	}
}

func (g *leafGate) forget(st *gatedStream) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if set := g.streams[st.key]; set != nil {
		delete(set, st)
		if len(set) == 0 {
			delete(g.streams, st.key)
		}
	}
}

// endKey ends every local stream of key with err.
func (g *leafGate) endKey(key string, err error) {
	g.mu.Lock()
	var sts []*gatedStream
	for st := range g.streams[key] {
		sts = append(sts, st)
	}
	g.mu.Unlock()
	for _, st := range sts {
		serve.EndStream(st.Context(), err)
	}
}

// recheck ends the streams whose key now acts for other services (a
// sidecar registration changed its destination): they reconnect and are
// vetted again.
func (g *leafGate) recheck() {
	type held struct {
		st       *gatedStream
		key      string
		services []string
	}
	g.mu.Lock()
	var sts []held
	for key, set := range g.streams {
		for st := range set {
			sts = append(sts, held{st, key, st.services})
		}
	}
	g.mu.Unlock()
	for _, h := range sts {
		if !slices.Equal(g.a.leafServices(h.key), h.services) {
			serve.EndStream(h.st.Context(), status.Errorf(codes.Unavailable, "the Connect services node.cluster %q acts for changed; reconnect", serve.ParseRelayKey(h.key).NodeCluster))
		}
	}
}
