package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// REST-JSON xDS (Envoy's api_type REST): a proxy POSTs a DiscoveryRequest
// as JSON to /v3/discovery:<type> every refresh_delay and gets the
// DiscoveryResponse as JSON. It is served on the xDS port itself (see
// portMux), from the very sets a gRPC stream of the same node.cluster
// gets, with the same versions and the same node authorization. A request
// whose version_info is the current version gets 304 Not Modified, which
// Envoy takes as "up to date", as go-control-plane's HTTP gateway does.
// REST has no ACK or NACK, so REST pollers do not appear on /v1/proxies.

var restPaths = map[string]string{
	resourcev3.FetchClusters:  resourcev3.ClusterType,
	resourcev3.FetchEndpoints: resourcev3.EndpointType,
	resourcev3.FetchListeners: resourcev3.ListenerType,
	resourcev3.FetchRoutes:    resourcev3.RouteType,
	resourcev3.FetchSecrets:   resourcev3.SecretType,
}

// maxRESTBody bounds a request like gRPC's MaxRecvMsgSize.
const maxRESTBody = 4 << 20

type tlsStateKey struct{}

// restServer is the HTTP/1.1 server of the REST transport.
func (s *Server) restServer() *http.Server {
	mux := http.NewServeMux()
	for path, typeURL := range restPaths {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) { s.serveFetch(w, r, typeURL) })
	}
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: handshakeTimeout,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		// http.Server fills Request.TLS only for a *tls.Conn; portMux
		// hands it a wrapper, so the handler reads the state from here.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if pc, ok := c.(*peekedConn); ok {
				if _, isTLS := pc.Conn.(*tls.Conn); isTLS {
					return context.WithValue(ctx, tlsStateKey{}, pc.ConnectionState())
				}
			}
			return ctx
		},
	}
}

func restError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

func (s *Server) serveFetch(w http.ResponseWriter, r *http.Request, typeURL string) {
	if s.cfg.Relay {
		// The agent vets its clients (allowed groups and node ids, who
		// may act for a Connect service and so get its leaf) on gRPC
		// streams only; a poll would pass none of it.
		restError(w, http.StatusNotFound, "REST-JSON xDS is served by the central bridge, not by the agent; use a gRPC xDS stream (bootstrap -xds-unix)")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRESTBody))
	if err != nil {
		restError(w, http.StatusRequestEntityTooLarge, "request body over 4 MiB or unreadable")
		return
	}
	req := &discoveryv3.DiscoveryRequest{}
	if err := protojson.Unmarshal(body, req); err != nil {
		restError(w, http.StatusBadRequest, "not a DiscoveryRequest in JSON: "+err.Error())
		return
	}
	req.TypeUrl = typeURL
	node := req.GetNode()
	switch {
	case node == nil:
		// As on gRPC: without a node the request would be served as
		// node.cluster "", which a "*" group matches.
		restError(w, http.StatusBadRequest, "the request must carry its node (id and cluster)")
		return
	case proto.Size(node) > maxNodeBytes:
		s.metrics.refused.Inc()
		restError(w, http.StatusBadRequest, fmt.Sprintf("node of %d bytes is over the limit of %d", proto.Size(node), maxNodeBytes))
		return
	}
	// The poll's key and the registration it stands for come from one
	// lookup, and authorization judges that registration: looked up
	// twice, a sidecar registered in between was served to a certificate
	// checked as an ordinary node of another group (and in central mode
	// its group holds the service's leaf key).
	key, info, err := s.sidecars.restKey(node)
	if err == nil && s.cfg.AuthorizeNodes {
		if code, msg := s.authorizeREST(r.Context(), node, info); code != 0 {
			restError(w, code, msg)
			return
		}
	}
	var ts *cache.Set
	if err == nil {
		ts, err = s.restSet(key, typeURL)
	}
	switch {
	case errors.Is(err, ErrNotReady), errors.Is(err, ErrNoGoodState):
		// Never a partial world: the poller retries after its delay.
		restError(w, http.StatusServiceUnavailable, err.Error())
		return
	case errors.Is(err, errReservedCluster):
		restError(w, http.StatusForbidden, err.Error())
		return
	case err != nil:
		restError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if req.GetVersionInfo() != "" && req.GetVersionInfo() == ts.Version() {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	resp := &discoveryv3.DiscoveryResponse{VersionInfo: ts.Version(), TypeUrl: typeURL, Resources: []*anypb.Any{}}
	names := req.GetResourceNames()
	for _, e := range ts.Entries() {
		if len(names) == 0 || slices.Contains(names, e.Name()) {
			resp.Resources = append(resp.Resources, e.Any())
		}
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(resp)
	if err != nil {
		restError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// authorizeREST applies authorize_nodes to a REST request: 0 if allowed,
// else the HTTP status and message.
func (s *Server) authorizeREST(ctx context.Context, node *corev3.Node, info *SidecarInfo) (int, string) {
	st, _ := ctx.Value(tlsStateKey{}).(tls.ConnectionState)
	if len(st.PeerCertificates) == 0 {
		return http.StatusUnauthorized, "xDS requires a client certificate"
	}
	cert := st.PeerCertificates[0]
	ok, why := authorized(cert, node), ""
	if info != nil {
		ok, why = sidecarAuthorized(cert, info), sidecarRefusal(info)
	}
	if !ok {
		s.log.Warn().Str("node", truncate(node.GetId(), 256)).Str("node_cluster", truncate(node.GetCluster(), 256)).
			Str("certificate", certIdentity(cert)).Str("transport", "REST").Msg("refused xDS client: certificate does not authorize this node")
		return http.StatusForbidden, fmt.Sprintf("certificate %s does not authorize node %q in group %q%s", certIdentity(cert), truncate(node.GetId(), 256), truncate(node.GetCluster(), 256), why)
	}
	return 0, ""
}

// restSet is the set of typeURL a poll's key (restKey) gets: what its node.cluster's
// gRPC streams are served (make-before-break included) while it has any,
// else the current translation, as /v1/config_dump computes it.
func (s *Server) restSet(key, typeURL string) (*cache.Set, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return nil, ErrNotReady
	}
	sets := s.cache.Served(key)
	if sets == nil {
		// A poll leaves nothing behind (rest-xds.md): setsLocked notes an
		// older Envoy's downgrades per key for /v1/proxies, and only a
		// stream's end forgets them, so a key no stream has must not
		// stay. Every poll may name a key of its own (node.cluster and
		// version are the client's to choose).
		_, had := s.downgraded[key]
		var err error
		sets, err = s.setsLocked(key)
		if !had {
			delete(s.downgraded, key)
		}
		if err != nil {
			return nil, err
		}
	}
	ts := sets[typeURL]
	if ts == nil {
		return nil, fmt.Errorf("no %s resources for this node", shortType(typeURL))
	}
	return ts, nil
}
