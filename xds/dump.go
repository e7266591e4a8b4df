package xds

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

var (
	// ErrUnknownNode: no connected stream has that node id (HTTP 404).
	ErrUnknownNode = errors.New("no connected proxy has that node id")
	// ErrNotReady: nothing has been served yet (HTTP 503).
	ErrNotReady = errors.New("no snapshot yet: the bridge has not completed its first sync")
)

// ConfigDump is what /v1/config_dump shows: the resources served to one
// node.cluster, each resource as protojson with proto field names.
type ConfigDump struct {
	// NodeID is set when the dump was asked for by node id.
	NodeID      string `json:"node_id,omitempty"`
	NodeCluster string `json:"node_cluster"`
	// Group is the proxy group node.cluster resolves to, "" for none.
	Group string `json:"group,omitempty"`
	// Versions is keyed by short type name (CDS, EDS, LDS, RDS, SDS).
	Versions  map[string]string `json:"versions"`
	Clusters  []json.RawMessage `json:"clusters"`
	Endpoints []json.RawMessage `json:"endpoints"`
	Listeners []json.RawMessage `json:"listeners"`
	Routes    []json.RawMessage `json:"routes"`
	// Secrets are the SDS secrets, private keys redacted.
	Secrets []json.RawMessage `json:"secrets,omitempty"`
}

// ConfigDump returns the resources a proxy gets. With nodeID, the proxy
// is looked up among connected streams (ErrUnknownNode if none) and its
// node.cluster used; otherwise nodeCluster is used directly, and a
// node.cluster no proxy has announced yet is computed from the current
// translation, exactly as it would be served. ErrNotReady before the
// first Update. It is the snapshot a node can subscribe to: over ADS,
// Envoy asks for all of CDS and LDS and for the EDS, RDS and SDS names
// those refer to. Private keys in it are "[redacted]".
func (s *Server) ConfigDump(nodeID, nodeCluster string) (*ConfigDump, error) {
	if nodeID != "" {
		key, ok := s.tracker.nodeCluster(nodeID)
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownNode, nodeID)
		}
		nodeCluster = key
	}
	key := nodeCluster
	nodeCluster, _ = parseKey(key)
	s.mu.Lock()
	if s.out == nil {
		s.mu.Unlock()
		return nil, ErrNotReady
	}
	group := s.groupOfKeyLocked(key)
	sets := s.cache.served(key)
	if sets == nil {
		built, err := s.setsLocked(key)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		sets = built
	}
	s.mu.Unlock()

	d := &ConfigDump{NodeID: nodeID, NodeCluster: nodeCluster, Group: group, Versions: map[string]string{}}
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
		ts := setOf(sets, part.typ)
		d.Versions[shortType(part.typ)] = ts.version
		*part.dst = make([]json.RawMessage, 0, len(ts.order))
		for _, e := range ts.order {
			b, err := marshalResource(e.res)
			if err != nil {
				return nil, fmt.Errorf("%s %q: %w", shortType(part.typ), e.name, err)
			}
			*part.dst = append(*part.dst, b)
		}
	}
	return d, nil
}

var dumpJSON = protojson.MarshalOptions{UseProtoNames: true}

// MarshalResource renders a resource as /v1/config_dump does: protojson
// with proto field names and private keys redacted. Tools that compare
// against a dump (plan) must render the same way.
func MarshalResource(r types.Resource) (json.RawMessage, error) { return marshalResource(r) }

// marshalResource renders one resource with its sensitive fields (the
// private keys of SDS secrets above all) replaced by "[redacted]", as
// Envoy's admin does. Redact works on a copy: the cached resource is
// shared with the cache and must keep its key.
func marshalResource(r types.Resource) (json.RawMessage, error) {
	b, err := dumpJSON.Marshal(Redact(r))
	if err != nil {
		return nil, err
	}
	return json.RawMessage(b), nil
}
