package xds

import (
	"encoding/json"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/encoding/protojson"
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
	// RouteSources says where the policy declares each route
	// (Resources.RouteSources); it is not part of what Envoy gets.
	RouteSources map[string]string `json:"route_sources,omitempty"`
}

var dumpJSON = protojson.MarshalOptions{UseProtoNames: true}

// MarshalResource renders a resource as /v1/config_dump does: protojson
// with proto field names and its sensitive fields (the private keys of SDS
// secrets above all) replaced by "[redacted]", as Envoy's admin does.
// Tools that compare against a dump (plan) must render the same way.
// Redact works on a copy: the resource may be shared with the serving
// cache and must keep its key.
func MarshalResource(r types.Resource) (json.RawMessage, error) {
	b, err := dumpJSON.Marshal(Redact(r))
	if err != nil {
		return nil, err
	}
	return json.RawMessage(b), nil
}
