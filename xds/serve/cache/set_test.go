package cache

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// endpointSet is a set of ClusterLoadAssignments, one endpoint each on
// 127.0.0.1 at the port given by cluster name.
func endpointSet(t *testing.T, ports map[string]uint32) *Set {
	t.Helper()
	var items []types.Resource
	for name, port := range ports {
		items = append(items, &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}}}}},
		}}})
	}
	ts, err := NewSet(resourcev3.EndpointType, items, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
