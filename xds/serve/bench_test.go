package serve

// Micro-benchmarks of the serving path at fleet scale (go test -bench .
// -benchmem ./xds/serve/...: the codec's are in package cache). The world
// is 1000 clusters × 20 endpoints, the size the load harness (bench/,
// cmd/xds-load) extrapolates to.

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/irtest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
)

const benchClusters, benchEndpoints = 1000, 20

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

// BenchmarkTranslateFull: the whole world, model to validated resources.
func BenchmarkTranslateFull(b *testing.B) {
	m := benchModel(-1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := xds.Translate(m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkServerUpdate: Server.Update after a one-endpoint change, with 1
// and 10 snapshot keys (node.clusters): building the changed sets, the
// consistency check and answering watches. translator feeds it what the
// daemon does (one Translator, so only the changed ClusterLoadAssignment
// is a new object); fresh gives it two independent translations, every
// resource a new object to marshal and compare.
func BenchmarkServerUpdate(b *testing.B) {
	tr := xds.NewTranslator()
	var outs [2][2]*xds.Output // [fresh, translator][flip]
	for k := range 2 {
		var err error
		if outs[0][k], err = xds.Translate(benchModel(k)); err != nil {
			b.Fatal(err)
		}
		if outs[1][k], err = tr.Translate(benchModel(k)); err != nil {
			b.Fatal(err)
		}
	}
	for mode, name := range []string{"fresh", "translator"} {
		for _, keys := range []int{1, 10} {
			b.Run(fmt.Sprintf("%s/keys=%d", name, keys), func(b *testing.B) {
				s := NewServer(ServerConfig{Logger: zerolog.Nop()})
				resolve := func(string) string { return "" }
				ctx := context.Background()
				if _, err := s.Update(ctx, outs[mode][0], resolve); err != nil {
					b.Fatal(err)
				}
				for k := 1; k < keys; k++ {
					s.sawNode(fmt.Sprintf("group-%d", k))
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					changed, err := s.Update(ctx, outs[mode][i%2], resolve)
					if err != nil || len(changed) != 1 {
						b.Fatalf("changed %v, err %v", changed, err)
					}
				}
			})
		}
	}
}

// BenchmarkContentVersion: marshalling and hashing every
// ClusterLoadAssignment into a new set, what Update pays for resources the
// Translator did not reuse.
func BenchmarkContentVersion(b *testing.B) {
	out, err := xds.Translate(benchModel(-1))
	if err != nil {
		b.Fatal(err)
	}
	eds := out.Shared.ByType()[resourcev3.EndpointType]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := contentVersion(resourcev3.EndpointType, eds); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMarshal: what go-control-plane does for every response on
// every stream: wrap each resource in an Any. MarshalEDSAll is one SotW
// EDS push of the whole world to one proxy; MarshalEDSOne is one delta EDS
// push of the changed resource; MarshalCDSAll a SotW CDS push.
func BenchmarkMarshal(b *testing.B) {
	out, err := xds.Translate(benchModel(-1))
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

// pushFixture has n SotW EDS watches open on one node.cluster, as n
// Envoys of one group would hold between pushes, served either by the
// bridge (Server and its cache.Cache) or by go-control-plane's snapshot
// cache with a new snapshot per change (the baseline).
type pushFixture struct {
	cache   cachev3.Cache
	bridge  *cache.Cache // set: streams driven as the bridge's SotW server drives them (sotw.go)
	update  func(tb testing.TB, k int)
	outs    [2]*xds.Output
	names   []string
	streams []pushStream
}

type pushStream struct {
	node *corev3.Node
	sub  stream.Subscription
	ch   chan cachev3.Response
}

func newPushFixture(tb testing.TB, snapshotCache bool, clusters, n int) *pushFixture {
	f := &pushFixture{}
	for k := range f.outs {
		m := benchModel(k)
		m.Clusters = m.Clusters[:clusters]
		var err error
		if f.outs[k], err = xds.Translate(m); err != nil {
			tb.Fatal(err)
		}
	}
	for _, c := range f.outs[0].Shared.Clusters {
		f.names = append(f.names, c.GetName())
	}
	if snapshotCache {
		sc := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
		f.cache = sc
		f.update = func(tb testing.TB, k int) {
			snap, err := cachev3.NewSnapshot(fmt.Sprint(k), f.outs[k%2].Shared.ByType())
			if err != nil {
				tb.Fatal(err)
			}
			if err := sc.SetSnapshot(context.Background(), "edge", snap); err != nil {
				tb.Fatal(err)
			}
		}
	} else {
		s := NewServer(ServerConfig{Logger: zerolog.Nop()})
		f.cache, f.bridge = s.cache, s.cache
		f.update = func(tb testing.TB, k int) {
			if _, err := s.Update(context.Background(), f.outs[k%2], func(string) string { return "" }); err != nil {
				tb.Fatal(err)
			}
			s.sawNode("edge") // as the callbacks do on a first request
		}
	}
	f.update(tb, 0)
	f.streams = make([]pushStream, n)
	for i := range f.streams {
		st := &f.streams[i]
		// The snapshot cache keys by node id (IDHash), the bridge by
		// node.cluster: both see one key.
		st.node = &corev3.Node{Id: "edge", Cluster: "edge"}
		st.sub = stream.NewSotwSubscription(f.names, false)
		st.ch = make(chan cachev3.Response, 1)
		// The first answer is the current state; then a watch waits.
		f.watch(tb, i, "", "")
		f.receive(tb, i)
	}
	return f
}

func (f *pushFixture) watch(tb testing.TB, i int, version, nonce string) {
	st := &f.streams[i]
	req := &discoveryv3.DiscoveryRequest{Node: st.node, TypeUrl: resourcev3.EndpointType, ResourceNames: f.names, VersionInfo: version, ResponseNonce: nonce}
	if f.bridge != nil {
		// The same names as before: the subscription is kept, and the
		// held versions are the answer's as it is handed over.
		f.bridge.OpenSotw(uint64(i), req, &st.sub, nonce != "", func(r cachev3.Response) {
			st.sub.SetReturnedResources(r.GetReturnedResources())
			st.ch <- r
		})
		return
	}
	if _, err := f.cache.CreateWatch(req, st.sub, st.ch); err != nil {
		tb.Fatal(err)
	}
}

// receive takes stream i's response, builds it and encodes it as gRPC
// would, and opens the next watch at its version (the ACK).
func (f *pushFixture) receive(tb testing.TB, i int) *discoveryv3.DiscoveryResponse {
	st := &f.streams[i]
	var resp cachev3.Response
	select {
	case resp = <-st.ch:
	default:
		tb.Fatalf("stream %d: no response", i)
	}
	out, err := resp.GetDiscoveryResponse()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := proto.Marshal(out); err != nil {
		tb.Fatal(err)
	}
	if f.bridge == nil {
		st.sub.SetReturnedResources(resp.GetReturnedResources())
		// The ACK names every subscribed resource again, as Envoy's do,
		// and go-control-plane's server rebuilds the subscription from it.
		st.sub.SetResourceSubscription(f.names)
	}
	f.watch(tb, i, out.GetVersionInfo(), "n")
	return out
}

// BenchmarkPushToManyStreams: one single-endpoint change pushed as SotW
// EDS to n open watches of one node.cluster, each response built and
// encoded as the stream would. snapshot-cache is go-control-plane's
// snapshot cache, a new snapshot per change (every subscribed resource
// marshalled for every stream); bridge is Server.Update and cache.Cache
// (only the changed ClusterLoadAssignment, marshalled once). Each stream
// holds 100 clusters × 20 endpoints (the harness's mixed fleet) or 1000
// (an edge proxy of the N=5000 world).
func BenchmarkPushToManyStreams(b *testing.B) {
	for _, size := range []struct{ n, clusters int }{{100, 100}, {1000, 100}, {1000, 1000}} {
		for _, mode := range []struct {
			name     string
			snapshot bool
		}{{"snapshot-cache", true}, {"bridge", false}} {
			n := size.n
			b.Run(fmt.Sprintf("n=%d/clusters=%d/%s", n, size.clusters, mode.name), func(b *testing.B) {
				f := newPushFixture(b, mode.snapshot, size.clusters, n)
				b.ReportAllocs()
				k := 0
				for b.Loop() {
					k++
					f.update(b, k)
					for i := range f.streams {
						f.receive(b, i)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/stream")
			})
		}
	}
}
