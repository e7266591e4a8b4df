package agent_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcxds "google.golang.org/grpc/xds" // gRPC's xDS resolver and balancers

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

type echo struct {
	testgrpc.UnimplementedTestServiceServer
	id string
}

func (e *echo) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{ServerId: e.id}, nil
}

// TestGRPCThroughAgentBalances: grpc-go's own xDS client, with the gRPC
// bootstrap `bootstrap -grpc -xds-unix` prints for the agent's socket,
// resolves xds:///echo through the agent and spreads calls over every
// Consul instance; an instance turning critical stops getting calls.
func TestGRPCThroughAgentBalances(t *testing.T) {
	ca := consultest.Start(t)
	for _, id := range []string{"echo-1", "echo-2", "echo-3"} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		testgrpc.RegisterTestServiceServer(s, &echo{id: id})
		go func() { _ = s.Serve(lis) }()
		t.Cleanup(s.Stop)
		ca.RegisterTTL(t, "echo", id, lis.Addr().(*net.TCPAddr).Port, nil, nil)
	}
	cen := startCentral(t, ca.HTTPAddr(), freeAddr(t))
	ag := startAgent(t, t.TempDir(), cen.addr)
	boot, err := xds.GRPCBootstrap(xds.BootstrapConfig{NodeID: "grpc-1", Cluster: "web", XDSUnix: ag.SocketAddr().String()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := grpcxds.NewXDSResolverWithConfigForTesting(boot)
	if err != nil {
		t.Fatalf("grpc-go rejects the bootstrap: %v\n%s", err, boot)
	}
	cc, err := grpc.NewClient("xds:///echo", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(res))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)
	spread := func(n int) map[string]int {
		t.Helper()
		got := map[string]int{}
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
			cancel()
			if err != nil {
				t.Fatalf("call through the agent: %v", err)
			}
			got[resp.GetServerId()]++
		}
		return got
	}
	deadline := time.Now().Add(20 * time.Second)
	for got := spread(30); len(got) != 3; got = spread(30) {
		if time.Now().After(deadline) {
			t.Fatalf("calls reached %v, want all three instances", got)
		}
	}
	ca.SetTTL(t, "service:echo-2", "critical")
	deadline = time.Now().Add(20 * time.Second)
	for got := spread(30); got["echo-2"] > 0 || len(got) != 2; got = spread(30) {
		if time.Now().After(deadline) {
			t.Fatalf("after echo-2 turned critical calls reached %v", got)
		}
	}
}
