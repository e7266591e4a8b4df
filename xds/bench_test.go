package xds

// Micro-benchmarks of the serving path at fleet scale (go test -bench .
// -benchmem ./xds). The world is 1000 clusters × 20 endpoints, the size
// the load harness (bench/, cmd/xds-load) extrapolates to.

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

const benchClusters, benchEndpoints = 1000, 20

func benchModel(flip int) *ir.Model {
	m := &ir.Model{Clusters: make([]ir.Cluster, benchClusters)}
	for i := range m.Clusters {
		c := &m.Clusters[i]
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
	return m
}

// BenchmarkTranslateFull: the whole world, model to validated resources.
func BenchmarkTranslateFull(b *testing.B) {
	m := benchModel(-1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Translate(m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkServerUpdate: Server.Update after a one-endpoint change, with 1
// and 10 snapshot keys (node.clusters). Includes hashing every type for
// its content version, the consistency check and SetSnapshot.
func BenchmarkServerUpdate(b *testing.B) {
	outs := make([]*Output, 2)
	for k := range outs {
		var err error
		if outs[k], err = Translate(benchModel(k)); err != nil {
			b.Fatal(err)
		}
	}
	for _, keys := range []int{1, 10} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			s := NewServer(ServerConfig{Logger: zerolog.Nop()})
			resolve := func(string) string { return "" }
			ctx := context.Background()
			if _, err := s.Update(ctx, outs[0], resolve); err != nil {
				b.Fatal(err)
			}
			for k := 1; k < keys; k++ {
				s.sawNode(fmt.Sprintf("group-%d", k))
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				changed, err := s.Update(ctx, outs[i%2], resolve)
				if err != nil || len(changed) != 1 {
					b.Fatalf("changed %v, err %v", changed, err)
				}
			}
		})
	}
}

// BenchmarkContentVersion: hashing all ClusterLoadAssignments, the part
// of Update that grows with the world (done once per type per Update).
func BenchmarkContentVersion(b *testing.B) {
	out, err := Translate(benchModel(-1))
	if err != nil {
		b.Fatal(err)
	}
	eds := out.Shared.ByType()[resourcev3.EndpointType]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := contentVersion(eds); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMarshal: what go-control-plane does for every response on
// every stream: wrap each resource in an Any. MarshalEDSAll is one SotW
// EDS push of the whole world to one proxy; MarshalEDSOne is one delta EDS
// push of the changed resource; MarshalCDSAll a SotW CDS push.
func BenchmarkMarshal(b *testing.B) {
	out, err := Translate(benchModel(-1))
	if err != nil {
		b.Fatal(err)
	}
	byType := out.Shared.ByType()
	for _, bc := range []struct {
		name  string
		items []types.Resource
	}{
		{"EDSAll", byType[resourcev3.EndpointType]},
		{"EDSOne", byType[resourcev3.EndpointType][:1]},
		{"CDSAll", byType[resourcev3.ClusterType]},
	} {
		b.Run(bc.name, func(b *testing.B) {
			size := 0
			for _, r := range bc.items {
				size += proto.Size(r)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				for _, r := range bc.items {
					if _, err := anypb.New(r); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
