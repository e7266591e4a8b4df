package serve

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Node authorization: the xDS config a node gets names every backend of its
// group, so with authorize_nodes a client may only claim the node.cluster
// (and node id) its certificate names:
//
//   - a URI SAN whose path is /group/<node.cluster> authorizes that group
//     for any node id, and /group/<node.cluster>/node/<node.id> that one
//     node only (e.g. spiffe://example.org/group/edge/node/edge-1);
//   - a DNS SAN equal to <node.cluster> authorizes that group.
func authorized(cert *x509.Certificate, node *corev3.Node) bool {
	if cert == nil {
		return false
	}
	for _, u := range cert.URIs {
		if uriAuthorizes(u, node) {
			return true
		}
	}
	return slices.Contains(cert.DNSNames, node.GetCluster()) && node.GetCluster() != ""
}

// uriAuthorizes holds the path to exactly /group/G or /group/G/node/N:
// a CA whose workloads choose their paths (SPIRE registrations, say)
// must not turn spiffe://td/team-a/x/group/edge into group edge.
func uriAuthorizes(u *url.URL, node *corev3.Node) bool {
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if len(parts) < 2 || parts[0] != "group" || parts[1] != node.GetCluster() || node.GetCluster() == "" {
		return false
	}
	switch rest := parts[2:]; {
	case len(rest) == 0:
		return true
	case len(rest) == 2 && rest[0] == "node":
		return rest[1] == node.GetId() && node.GetId() != ""
	}
	return false
}

// authzInterceptor checks the node a stream claims against the client
// certificate before the xDS servers see the stream: it reads the first
// request itself and refuses the stream with PermissionDenied (which the
// client sees as the stream's status) or hands it on, replaying that
// request. Later requests that switch to another node end the stream.
func authzInterceptor(log zerolog.Logger, authorize func(*x509.Certificate, *corev3.Node) (bool, string)) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !strings.HasPrefix(info.FullMethod, "/envoy.service.") {
			return handler(srv, ss) // e.g. gRPC health
		}
		cert := peerCert(ss.Context())
		if cert == nil {
			return status.Error(codes.Unauthenticated, "xDS requires a client certificate")
		}
		// firstRequestInterceptor (outside this one) has read the first
		// request and replays it: check that one rather than read and
		// replay it a second time.
		first, under := replayed(ss)
		if first == nil {
			first = &discoveryv3.DiscoveryRequest{}
			if strings.Contains(info.FullMethod, "Delta") {
				first = &discoveryv3.DeltaDiscoveryRequest{}
			}
			if err := ss.RecvMsg(first); err != nil {
				return err
			}
			under = &replayStream{ServerStream: ss, first: first}
		}
		as := &authzStream{ServerStream: under, cert: cert, log: log, authorize: authorize}
		if err := as.check(first); err != nil {
			return err
		}
		if !as.checked {
			// Without a node the request would be served as node.cluster
			// "", which a "*" group matches: refuse rather than guess.
			log.Warn().Str("certificate", certIdentity(cert)).Msg("refused xDS client: its first request names no node")
			return status.Error(codes.InvalidArgument, "the first xDS request of a stream must carry its node (id and cluster)")
		}
		return handler(srv, as)
	}
}

// replayed is the first request ss replays, and ss; nil if it is not a
// replayStream that still holds it.
func replayed(ss grpc.ServerStream) (proto.Message, grpc.ServerStream) {
	if rs, ok := ss.(*replayStream); ok && rs.first != nil {
		return rs.first, rs
	}
	return nil, ss
}

type authzStream struct {
	// The stream under it replays the first request, checked already:
	// check finds its node authorized (last).
	grpc.ServerStream
	cert      *x509.Certificate
	log       zerolog.Logger
	authorize func(*x509.Certificate, *corev3.Node) (bool, string) // Server.authorizeNode
	// id and cluster are the identity the first request claimed and the
	// certificate authorized (checked); a later request may omit it, not
	// change it. Strings, not the node: its requests share that.
	id, cluster string
	checked     bool
	// last is the node last authorized: a stream's requests share the
	// node they carry (package cache's nodememo.go), so Envoy's node on every request is
	// authorized once, not per ACK.
	last *corev3.Node
}

func (s *authzStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.check(m)
}

func (s *authzStream) check(m any) error {
	node := cache.RequestNode(m)
	// Envoy may send the node only on a stream's first request; requests
	// without one keep the identity checked then.
	if node == nil || node == s.last {
		return nil
	}
	if s.checked && (node.GetId() != s.id || node.GetCluster() != s.cluster) {
		// Client-chosen strings of any length: cut, in the log and the answer.
		s.log.Warn().Str("node", truncate(node.GetId(), 256)).Str("node_cluster", truncate(node.GetCluster(), 256)).Str("first_node", truncate(s.id, 256)).
			Str("certificate", certIdentity(s.cert)).Msg("refused xDS client: node changed within a stream")
		return status.Errorf(codes.PermissionDenied, "node %q in group %q cannot become node %q in group %q within a stream", truncate(s.id, 256), truncate(s.cluster, 256), truncate(node.GetId(), 256), truncate(node.GetCluster(), 256))
	}
	ok, why := s.authorize(s.cert, node)
	if ok {
		if !s.checked {
			s.id, s.cluster, s.checked = node.GetId(), node.GetCluster(), true
		}
		s.last = node
		return nil
	}
	s.log.Warn().Str("node", truncate(node.GetId(), 256)).Str("node_cluster", truncate(node.GetCluster(), 256)).
		Str("certificate", certIdentity(s.cert)).Msg("refused xDS client: certificate does not authorize this node")
	return status.Errorf(codes.PermissionDenied, "certificate %s does not authorize node %q in group %q%s", certIdentity(s.cert), truncate(node.GetId(), 256), truncate(node.GetCluster(), 256), why)
}

func peerCert(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return nil
	}
	return ti.State.PeerCertificates[0]
}

func certIdentity(c *x509.Certificate) string {
	if c == nil {
		return "no certificate"
	}
	var ids []string
	for _, u := range c.URIs {
		ids = append(ids, u.String())
	}
	ids = append(ids, c.DNSNames...)
	if len(ids) == 0 {
		return "CN=" + c.Subject.CommonName
	}
	return strings.Join(ids, ",")
}

// authorizeNode is authorize_nodes' one decision for a node: a registered
// Connect sidecar (served by its node id, whatever node.cluster it
// announces) by the service its certificate names (sidecarAuthorized),
// any other node by the node.cluster and id it announces (authorized).
// A sidecar whose registration the server learns only later is checked
// again when it is keyed (sidecarStream.keyNode).
// The second result explains a refused sidecar, to append to the refusal.
func (s *Server) authorizeNode(cert *x509.Certificate, node *corev3.Node) (bool, string) {
	if info := s.sidecars.lookup(node); info != nil {
		return sidecarAuthorized(cert, info), sidecarRefusal(info)
	}
	return authorized(cert, node), ""
}

func sidecarRefusal(info *SidecarInfo) string {
	return fmt.Sprintf(": it is the Connect sidecar of %q, so the certificate must name that service (URI SAN .../svc/%s, as its Connect leaf does, or /group/%s)", info.Service, info.Service, info.Service)
}
