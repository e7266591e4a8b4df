package serve

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

var (
	// ErrUnknownNode: no connected stream has that node id (HTTP 404).
	ErrUnknownNode = errors.New("no connected proxy has that node id")
	// ErrNotReady: nothing has been served yet (HTTP 503).
	ErrNotReady = errors.New("no snapshot yet: the bridge has not completed its first sync")
)

// ConfigDump returns the resources a proxy gets. With nodeID, the proxy
// is looked up among connected streams (ErrUnknownNode if none) and its
// node.cluster used; otherwise nodeCluster is used directly, and a
// node.cluster no proxy has announced yet is computed from the current
// translation, exactly as it would be served. ErrNotReady before the
// first Update. It is the snapshot a node can subscribe to: over ADS,
// Envoy asks for all of CDS and LDS and for the EDS, RDS and SDS names
// those refer to. Private keys in it are "[redacted]".
func (s *Server) ConfigDump(nodeID, nodeCluster string) (*xds.ConfigDump, error) {
	if nodeID != "" {
		key, ok := s.tracker.nodeCluster(nodeID)
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownNode, nodeID)
		}
		nodeCluster = key
	}
	key := nodeCluster
	nodeCluster, _ = cache.ParseKey(key)
	s.mu.Lock()
	if s.out == nil {
		s.mu.Unlock()
		return nil, ErrNotReady
	}
	group := s.groupOfKeyLocked(key)
	var sources map[string]string
	if r := s.groupResourcesLocked(key); r != nil {
		sources = r.RouteSources
	}
	sets := s.cache.Served(key)
	if sets == nil {
		built, err := s.setsLocked(key)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		sets = built
	}
	s.mu.Unlock()

	d := &xds.ConfigDump{NodeID: nodeID, NodeCluster: nodeCluster, Group: group, Versions: map[string]string{}, RouteSources: sources}
	for _, part := range []struct {
		typ string
		dst *[]json.RawMessage
	}{
		{resourcev3.ClusterType, &d.Clusters},
		{resourcev3.EndpointType, &d.Endpoints},
		{resourcev3.ListenerType, &d.Listeners},
		{resourcev3.RouteType, &d.Routes},
		{resourcev3.SecretType, &d.Secrets},
	} {
		ts := sets[part.typ]
		d.Versions[shortType(part.typ)] = ts.Version()
		*part.dst = make([]json.RawMessage, 0, len(ts.Entries()))
		for _, e := range ts.Entries() {
			b, err := xds.MarshalResource(e.Resource())
			if err != nil {
				return nil, fmt.Errorf("%s %q: %w", shortType(part.typ), e.Name(), err)
			}
			*part.dst = append(*part.dst, b)
		}
	}
	return d, nil
}

// ProxylessKey is the key ConfigDump takes for the proxyless gRPC clients
// announcing nodeCluster: what they are served.
func ProxylessKey(nodeCluster string) string { return cache.ProxylessKey(nodeCluster) }
