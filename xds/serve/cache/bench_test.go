package cache

// Micro-benchmarks of the cache's encodings at fleet scale (go test -bench
// . -benchmem ./xds/serve/...), on the world xds/serve's benchmarks use:
// 1000 clusters × 20 endpoints.

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/irtest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

const benchClusters, benchEndpoints = 1000, 20

// benchModel is xds/serve's (bench_test.go): the same world, so the
// numbers compare.
func benchModel(flip int) *ir.Model {
	m := &ir.Model{Clusters: make([]*ir.Cluster, benchClusters)}
	for i := range m.Clusters {
		c := &ir.Cluster{}
		m.Clusters[i] = c
		c.Name = fmt.Sprintf("svc-%04d", i)
		c.Service = c.Name
		c.ConnectTimeout = 5 * time.Second
		c.LBPolicy = ir.LBRoundRobin
		c.Endpoints = make([]ir.Endpoint, benchEndpoints)
		for j := range c.Endpoints {
			n := i*benchEndpoints + j
			c.Endpoints[j] = ir.Endpoint{
				Address:  netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}),
				Port:     uint32(8000 + j),
				Weight:   1,
				Locality: ir.Locality{Region: "dc1", Zone: "z1"},
			}
		}
	}
	// flip selects which single endpoint is unhealthy: one-instance changes.
	if flip >= 0 {
		m.Clusters[0].Endpoints[flip%benchEndpoints].Health = ir.Unhealthy
	}
	return irtest.Reach(m)
}

// BenchmarkEncodeResponse: what a stream's send costs in the codec for a
// flip (one ClusterLoadAssignment) and a full edge sync (1000 clusters):
// shared (codec.go: the prefix encoded once, then only the nonce) vs. each
// stream encoding the whole DiscoveryResponse.
func BenchmarkEncodeResponse(b *testing.B) {
	out, err := xds.Translate(benchModel(-1))
	if err != nil {
		b.Fatal(err)
	}
	codec := NewCodec()
	for _, typ := range []string{resourcev3.EndpointType, resourcev3.ClusterType} {
		ts, err := NewSet(typ, out.Shared.ByType()[typ], nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, len(ts.order)} {
			entries := ts.order[:n]
			sh := newSharedSotw(ts.version, ts.typeURL, entries)
			own := &SotwResponse{set: ts, entries: entries}
			for _, mode := range []string{"shared", "per-stream"} {
				b.Run(fmt.Sprintf("%s/%d/%s", typ[strings.LastIndex(typ, ".")+1:], n, mode), func(b *testing.B) {
					b.ReportAllocs()
					for i := 0; b.Loop(); i++ {
						var m *discoveryv3.DiscoveryResponse
						if mode == "shared" {
							m = sh.response(ts.version, ts.typeURL)
						} else {
							m, _ = own.GetDiscoveryResponse()
						}
						m.Nonce = strconv.Itoa(i)
						data, err := codec.Marshal(m)
						if err != nil {
							b.Fatal(err)
						}
						data.Free()
					}
				})
			}
		}
	}
}
