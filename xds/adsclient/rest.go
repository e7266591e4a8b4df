package adsclient

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// RESTPath is the REST-JSON xDS path of a type URL, as Envoy's api_type
// REST posts to it.
var RESTPath = map[string]string{
	ClusterType:  resourcev3.FetchClusters,
	EndpointType: resourcev3.FetchEndpoints,
	ListenerType: resourcev3.FetchListeners,
	RouteType:    resourcev3.FetchRoutes,
	SecretType:   resourcev3.FetchSecrets,
}

// RESTResult is one REST poll: the HTTP status, and for 200 the version
// and the resources by name.
type RESTResult struct {
	Status    int
	Version   string
	Resources map[string]proto.Message
	Body      string // the body of an error answer
}

// FetchREST makes one REST-JSON xDS request as Envoy does: POST base +
// /v3/discovery:<type> with the DiscoveryRequest as JSON, version_info
// the last version it accepted ("" at first) and the resource names it
// wants (none for CDS and LDS).
func FetchREST(ctx context.Context, hc *http.Client, base, typeURL string, node *corev3.Node, version string, names ...string) (*RESTResult, error) {
	body, err := protojson.Marshal(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeURL, VersionInfo: version, ResourceNames: names})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+RESTPath[typeURL], bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	res := &RESTResult{Status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		res.Body = string(b)
		return res, nil
	}
	var dr discoveryv3.DiscoveryResponse
	if err := protojson.Unmarshal(b, &dr); err != nil {
		return nil, fmt.Errorf("response is not a DiscoveryResponse: %w", err)
	}
	res.Version, res.Resources = dr.GetVersionInfo(), map[string]proto.Message{}
	for _, a := range dr.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			return nil, err
		}
		res.Resources[resourceName(m)] = m
	}
	return res, nil
}
