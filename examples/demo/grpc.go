package main

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	_ "google.golang.org/grpc/xds" // xds:/// targets: the proxyless client

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// echoServer answers gRPC's interop UnaryCall with its instance id, so
// the proxyless client shows which Consul instance each call reached.
type echoServer struct {
	testgrpc.UnimplementedTestServiceServer
	id string
}

func (e *echoServer) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{ServerId: e.id, Hostname: e.id}, nil
}

// startEcho serves one echo instance with gRPC health (Consul's GRPC
// check reads it) and registers it in Consul as service "echo".
func startEcho(ctx context.Context, client *api.Client, id string) (deregister func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, &echoServer{id: id})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	go func() { <-ctx.Done(); srv.Stop() }()
	port := lis.Addr().(*net.TCPAddr).Port
	reg := &api.AgentServiceRegistration{
		ID: id, Name: "echo", Address: "127.0.0.1", Port: port, Tags: []string{"demo", "grpc"},
		Check: &api.AgentServiceCheck{
			GRPC: fmt.Sprintf("127.0.0.1:%d", port), Interval: "2s", Timeout: "1s",
			DeregisterCriticalServiceAfter: "10m",
		},
	}
	if err := client.Agent().ServiceRegister(reg); err != nil {
		srv.Stop()
		return nil, fmt.Errorf("register %s: %w", id, err)
	}
	fmt.Printf("  %-6s grpc://127.0.0.1:%d   (gRPC echo: interop TestService.UnaryCall answers with its id)\n", id, port)
	return func() { _ = client.Agent().ServiceDeregister(id) }, nil
}

// startGRPCClient runs the proxyless gRPC client as a child process (this
// binary with -grpc-client), with its xDS bootstrap from `bootstrap
// -grpc` (the same function) in GRPC_XDS_BOOTSTRAP_CONFIG, as a real
// deployment gives it: gRPC reads that variable once, at start.
func startGRPCClient(ctx context.Context, xdsAddr string) (*exec.Cmd, error) {
	boot, err := xds.GRPCBootstrap(xds.BootstrapConfig{NodeID: "demo-grpc-client", Cluster: "grpc-demo", XDS: []string{xdsAddr}})
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "-grpc-client")
	cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP_CONFIG="+string(boot))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	return cmd, cmd.Start()
}

// grpcClient is the child process: it dials xds:///echo through the
// bridge and calls it once a second, printing which instances answered
// every 10 s, so the console shows a live, SYNCED gRPC client.
func grpcClient(ctx context.Context) error {
	cc, err := grpc.NewClient("xds:///echo", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	func() {
		defer cc.Close()
		c := testgrpc.NewTestServiceClient(cc)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		counts := map[string]int{}
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			resp, err := c.UnaryCall(cctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
			cancel()
			if err != nil {
				counts["error: "+err.Error()]++
			} else {
				counts[resp.GetServerId()]++
			}
			if n%10 == 0 {
				var parts []string
				for _, k := range slices.Sorted(maps.Keys(counts)) {
					parts = append(parts, fmt.Sprintf("%s ×%d", k, counts[k]))
				}
				fmt.Printf("demo gRPC client (xds:///echo, proxyless): last 10 calls answered by %s\n", strings.Join(parts, ", "))
				clear(counts)
			}
		}
	}()
	return nil
}
