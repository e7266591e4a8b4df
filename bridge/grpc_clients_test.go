package bridge_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	grpcxds "google.golang.org/grpc/xds" // registers gRPC's xDS resolver, balancers and filters

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/grpcnode"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// The proxyless tests run each scenario with two independent real xDS
// clients, grpc-go and grpc-node, both given the bootstrap `bootstrap
// -grpc` prints (xds.GRPCBootstrap, which the CLI prints byte for byte):
// what one implementation accepts another may NACK (issue 15).

// caller is one real gRPC client's channel to one xds:/// target.
type caller interface {
	// call makes one UnaryCall with metadata md (key, value pairs) and
	// returns the id of the instance that answered, or the call's status
	// as an error.
	call(ctx context.Context, waitForReady bool, md ...string) (string, error)
}

// grpcImpl is a gRPC implementation under test.
type grpcImpl struct {
	name string
	// faultText is in the error of a call aborted by fault injection.
	faultText string
	// randomNACK is in its NACK of a cluster with lb_policy RANDOM.
	randomNACK string
	// require skips (or fails under CI=true) when the client cannot run.
	require func(t *testing.T)
	dial    func(t *testing.T, boot []byte, target string) caller
}

var grpcImpls = []grpcImpl{
	{
		name:       "grpc-go",
		faultText:  "fault injection",
		randomNACK: "lbPolicy RANDOM",
		require:    func(*testing.T) {},
		dial: func(t *testing.T, boot []byte, target string) caller {
			res, err := grpcxds.NewXDSResolverWithConfigForTesting(boot)
			if err != nil {
				t.Fatalf("grpc-go rejects the bootstrap: %v\n%s", err, boot)
			}
			cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(res))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cc.Close() })
			return goCaller{testgrpc.NewTestServiceClient(cc)}
		},
	},
	{
		name:       "grpc-node",
		faultText:  "Fault injected",
		randomNACK: "lb_policy: RANDOM",
		require:    func(t *testing.T) { grpcnode.Require(t) },
		dial: func(t *testing.T, boot []byte, target string) caller {
			return nodeCaller{grpcnode.Start(t, boot), target}
		},
	},
}

type goCaller struct{ c testgrpc.TestServiceClient }

func (g goCaller) call(ctx context.Context, waitForReady bool, md ...string) (string, error) {
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	resp, err := g.c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(waitForReady))
	return resp.GetServerId(), err
}

type nodeCaller struct {
	c      *grpcnode.Client
	target string
}

func (n nodeCaller) call(ctx context.Context, waitForReady bool, md ...string) (string, error) {
	return n.c.Call(ctx, n.target, waitForReady, md...)
}

// forEachImpl runs f as a subtest per gRPC implementation.
func forEachImpl(t *testing.T, f func(t *testing.T, impl grpcImpl)) {
	for _, impl := range grpcImpls {
		t.Run(impl.name, func(t *testing.T) {
			impl.require(t)
			f(t, impl)
		})
	}
}

// dialXDS is a client of impl for target (xds:///NAME), with the
// bootstrap the bridge prints for nodeID in nodeCluster. When the test
// ends, before the client goes, /v1/proxies must show no NACK from it:
// the bridge serves gRPC clients only what they accept.
func dialXDS(t *testing.T, impl grpcImpl, h *harness, nodeID, nodeCluster, target string) caller {
	t.Helper()
	c := dialXDSAllowingNACK(t, impl, h, nodeID, nodeCluster, target)
	t.Cleanup(func() {
		if p := proxyByNode(proxies(t, h), nodeID); p != nil {
			for typ, s := range p.Types {
				if s.LastNACK != nil {
					t.Errorf("%s (%s) NACKed %s version %s: %s", nodeID, impl.name, typ, s.LastNACK.Version, s.LastNACK.Error)
				}
			}
		}
	})
	return c
}

func dialXDSAllowingNACK(t *testing.T, impl grpcImpl, h *harness, nodeID, nodeCluster, target string) caller {
	t.Helper()
	boot, err := xds.GRPCBootstrap(xds.BootstrapConfig{NodeID: nodeID, Cluster: nodeCluster, XDS: []string{h.daemon.XDSAddr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	return impl.dial(t, boot, target)
}

// call makes one call (5s deadline, failing fast without a ready
// endpoint) and returns the id of the instance that answered.
func call(c caller, md ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.call(ctx, false, md...)
}

// callN makes n calls, failing the test on any error, and counts answers
// by instance id.
func callN(t *testing.T, c caller, n int, md ...string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for i := range n {
		id, err := call(c, md...)
		if err != nil {
			t.Fatalf("call %d of %d: %v", i+1, n, err)
		}
		counts[id]++
	}
	return counts
}

// warmUp calls until every instance in want has answered, so that counted
// calls start with every subchannel connected (round robin only picks
// ready ones). The first calls wait for xDS: LDS, RDS, CDS, EDS.
func warmUp(t *testing.T, c caller, want ...string) {
	t.Helper()
	warmUpWith(t, c, nil, want...)
}

// warmUpWith is warmUp for calls carrying the metadata md.
func warmUpWith(t *testing.T, c caller, md []string, want ...string) {
	t.Helper()
	seen := map[string]bool{}
	deadline := time.Now().Add(20 * time.Second)
	var lastErr error
	for len(seen) < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("within 20s only %v of %v answered; last error: %v", slices.Sorted(maps.Keys(seen)), want, lastErr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		id, err := c.call(ctx, true, md...)
		cancel()
		if err != nil {
			lastErr = err
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if slices.Contains(want, id) {
			seen[id] = true
		}
	}
}
