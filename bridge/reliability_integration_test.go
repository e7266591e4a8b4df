package bridge_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// runBridge starts a bridge and returns it with a stop function that waits
// for it to exit.
func runBridge(t *testing.T, consulAddr string) (*bridge.Daemon, func()) {
	t.Helper()
	s := policy.DefaultSettings()
	s.Consul.Address = consulAddr
	s.Consul.WaitTime = 5 * time.Second
	s.XDS.Listen, s.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	d := bridge.New(bridge.Config{
		Settings: s,
		Logger:   zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		Query:    consul.QueryOptions{BackoffInitial: 100 * time.Millisecond, BackoffMax: time.Second},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	<-d.Started()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("bridge: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Error("bridge did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return d, stop
}

// contentHashes maps each resource of a type to a hash of its bytes.
func contentHashes(t *testing.T, st adsclient.State, typeURL string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, m := range st.Types[typeURL].Resources {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = fmt.Sprintf("%x", b)
	}
	return out
}

// TestRestartServesCompleteStateFirst: after a bridge restart, a proxy's
// first response is the complete state, with the same versions and content
// as before, so reconnecting Envoys see no churn.
func TestRestartServesCompleteStateFirst(t *testing.T) {
	agent := consultest.Start(t)
	for i := 1; i <= 3; i++ {
		agent.RegisterTTL(t, "web", fmt.Sprintf("web-%d", i), 1000+i, nil, nil)
		agent.RegisterTTL(t, "api", fmt.Sprintf("api-%d", i), 2000+i, nil, nil)
	}
	d1, stop1 := runBridge(t, agent.HTTPAddr())
	c1 := dial(t, &harness{daemon: d1}, adsclient.SotW, nil)
	waitEndpoints(t, "web", join(ep(1001, "HEALTHY"), ep(1002, "HEALTHY"), ep(1003, "HEALTHY")), c1)
	waitEndpoints(t, "api", join(ep(2001, "HEALTHY"), ep(2002, "HEALTHY"), ep(2003, "HEALTHY")), c1)
	before := c1.Snapshot()
	stop1()

	for _, mode := range []adsclient.Mode{adsclient.SotW, adsclient.Delta} {
		d2, _ := runBridge(t, agent.HTTPAddr())
		var (
			mu    sync.Mutex
			first = map[string]adsclient.State{}
		)
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		c2, err := adsclient.Dial(ctx, adsclient.Config{
			Addr: d2.XDSAddr().String(), NodeID: "again-" + mode.String(), Cluster: "anything", Mode: mode,
			OnUpdate: func(u adsclient.Update) {
				mu.Lock()
				defer mu.Unlock()
				if _, ok := first[u.TypeURL]; !ok {
					first[u.TypeURL] = u.State
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c2.Wait(ctx, func(s adsclient.State) bool { return len(s.LoadAssignmentNames()) == len(before.LoadAssignmentNames()) })
		cancel()
		c2.Close()
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		mu.Lock()
		cds, eds := first[adsclient.ClusterType], first[adsclient.EndpointType]
		mu.Unlock()
		if !slices.Equal(cds.ClusterNames(), before.ClusterNames()) {
			t.Errorf("%s: first CDS response after restart has %v, before %v", mode, cds.ClusterNames(), before.ClusterNames())
		}
		if got, want := contentHashes(t, cds, adsclient.ClusterType), contentHashes(t, before, adsclient.ClusterType); !mapsEqual(got, want) {
			t.Errorf("%s: cluster content changed across the restart", mode)
		}
		if got, want := contentHashes(t, eds, adsclient.EndpointType), contentHashes(t, before, adsclient.EndpointType); !mapsEqual(got, want) {
			t.Errorf("%s: first EDS response after restart differs from before: %d vs %d resources", mode, len(got), len(want))
		}
		if mode == adsclient.SotW && cds.Version(adsclient.ClusterType) != before.Version(adsclient.ClusterType) {
			t.Errorf("CDS version changed across the restart: %q -> %q", before.Version(adsclient.ClusterType), cds.Version(adsclient.ClusterType))
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestStuckClientDoesNotBlockOthers: a client that opens ADS and never
// reads does not hold up pushes to the others, and memory stays bounded.
func TestStuckClientDoesNotBlockOthers(t *testing.T) {
	agent := consultest.Start(t)
	const services = 20
	for s := range services {
		for i := 1; i <= 3; i++ {
			agent.RegisterTTL(t, fmt.Sprintf("svc%02d", s), fmt.Sprintf("svc%02d-%d", s, i), 3000+s*10+i, nil, nil)
		}
	}
	d, _ := runBridge(t, agent.HTTPAddr())
	h := &harness{daemon: d}
	good1 := dial(t, h, adsclient.SotW, nil)
	good2 := dial(t, h, adsclient.Delta, nil)
	waitEndpoints(t, "svc00", join(ep(3001, "HEALTHY"), ep(3002, "HEALTHY"), ep(3003, "HEALTHY")), good1, good2)

	// The stuck client subscribes to everything, then never reads.
	conn, err := grpc.NewClient(d.XDSAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "stuck", Cluster: "anything"}
	var names []string
	for s := range services {
		names = append(names, fmt.Sprintf("svc%02d", s))
	}
	for _, req := range []*discoveryv3.DiscoveryRequest{
		{Node: node, TypeUrl: adsclient.ClusterType},
		{Node: node, TypeUrl: adsclient.EndpointType, ResourceNames: names},
	} {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}

	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for i := range 200 {
		status := "critical"
		if (i/services)%2 == 1 {
			status = "passing"
		}
		agent.SetTTL(t, fmt.Sprintf("service:svc%02d-1", i%services), status)
	}
	// Every service's first instance was flipped 10 times, ending passing.
	agent.SetTTL(t, "service:svc07-2", "critical")
	want := join(ep(3071, "HEALTHY"), ep(3072, "UNHEALTHY"), ep(3073, "HEALTHY"))
	took := waitEndpoints(t, "svc07", want, good1, good2)
	t.Logf("after 200 flips with a stuck client, the others converged in %v", took)
	for s := range services {
		base := 3000 + s*10
		waitEndpoints(t, fmt.Sprintf("svc%02d", s), summaryFor(s, base), good1, good2)
	}
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	grown := int64(m1.HeapInuse) - int64(m0.HeapInuse)
	t.Logf("heap in use grew by %d KiB over 200 updates", grown/1024)
	if grown > 64<<20 {
		t.Errorf("heap grew by %d MiB with a stuck client; want bounded", grown>>20)
	}
	if st := d.Ready(); !st {
		t.Error("bridge lost readiness")
	}
}

// summaryFor is the final endpoint set of service s in the stuck-client
// test: all healthy except svc07-2.
func summaryFor(s, base int) string {
	second := "HEALTHY"
	if s == 7 {
		second = "UNHEALTHY"
	}
	return join(ep(base+1, "HEALTHY"), ep(base+2, second), ep(base+3, "HEALTHY"))
}
