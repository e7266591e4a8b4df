// Command demo runs consul-xds-bridge against a local Consul with a few
// demo services, for `make run`. It starts a `consul agent -dev` when none
// answers at the configured address, starts small HTTP backends that answer
// with their instance id and a gRPC echo service, registers them with
// health checks, runs the bridge binary with the given config, and a
// proxyless gRPC client calling the echo service through it, until
// interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

func main() {
	consulBin := flag.String("consul", "consul", "consul binary to start when no agent answers")
	bridgeBin := flag.String("bridge", "bin/consul-xds-bridge", "consul-xds-bridge binary")
	config := flag.String("config", "config.hcl", "bridge configuration file")
	asClient := flag.Bool("grpc-client", false, "be the demo's proxyless gRPC client (started by the demo itself)")
	flag.Parse()
	if *asClient {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := grpcClient(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "demo gRPC client:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*consulBin, *bridgeBin, *config); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// demoServices are registered with these instance counts.
var demoServices = []struct {
	name      string
	instances int
}{{"web", 3}, {"api", 2}}

func run(consulBin, bridgeBin, config string) error {
	cfg, _, diags := policy.LoadFiles(config)
	if diags.HasErrors() {
		return fmt.Errorf("%s: %s", config, diags.Error())
	}
	s := cfg.Settings
	addr := s.Consul.Address
	if addr == "" {
		addr = "127.0.0.1:8500"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	apiCfg := api.DefaultConfig()
	apiCfg.Address = addr
	client, err := api.NewClient(apiCfg)
	if err != nil {
		return err
	}
	if !consulAnswers(client) {
		agent, err := startConsul(consulBin, addr)
		if err != nil {
			return err
		}
		defer func() {
			_ = agent.Process.Signal(syscall.SIGTERM)
			_ = agent.Wait()
		}()
		if err := waitForLeader(ctx, client); err != nil {
			return err
		}
		fmt.Printf("started consul agent -dev at http://%s (UI at /ui)\n", addr)
	} else {
		fmt.Printf("using the Consul agent at http://%s\n", addr)
	}

	for _, svc := range demoServices {
		for i := 1; i <= svc.instances; i++ {
			id := fmt.Sprintf("%s-%d", svc.name, i)
			port, err := startBackend(ctx, id)
			if err != nil {
				return err
			}
			reg := &api.AgentServiceRegistration{
				ID: id, Name: svc.name, Address: "127.0.0.1", Port: port,
				Tags: []string{"demo", "v" + strconv.Itoa(1+(i-1)%2)},
				Check: &api.AgentServiceCheck{
					HTTP: fmt.Sprintf("http://127.0.0.1:%d/health", port), Interval: "2s", Timeout: "1s",
					DeregisterCriticalServiceAfter: "10m",
				},
			}
			if err := client.Agent().ServiceRegister(reg); err != nil {
				return fmt.Errorf("register %s: %w", id, err)
			}
			defer func() { _ = client.Agent().ServiceDeregister(id) }()
			fmt.Printf("  %-6s http://127.0.0.1:%d   (curl .../fail to make its health check fail, .../recover to heal)\n", id, port)
		}
	}

	for i := 1; i <= 2; i++ {
		deregister, err := startEcho(ctx, client, fmt.Sprintf("echo-%d", i))
		if err != nil {
			return err
		}
		defer deregister()
	}

	bridge := exec.CommandContext(ctx, bridgeBin, "run", "-config", config)
	bridge.Stdout, bridge.Stderr = os.Stdout, os.Stderr
	bridge.Cancel = func() error { return bridge.Process.Signal(syscall.SIGTERM) }
	bridge.WaitDelay = 10 * time.Second
	if err := bridge.Start(); err != nil {
		return fmt.Errorf("start bridge: %w", err)
	}
	tokenFile, _, err := s.AdminTokenPath()
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	grpcClient, err := startGRPCClient(ctx, s.XDS.Listen)
	if err != nil {
		return fmt.Errorf("gRPC client: %w", err)
	}
	defer func() { _ = grpcClient.Wait() }()
	fmt.Printf(`
consul-xds-bridge is running:
  console:          http://%[2]s/ui/
  xDS (ADS, gRPC):  %[1]s
  admin HTTP:       http://%[2]s/readyz   http://%[2]s/v1/policy
  admin token:      in %[4]s (the console asks for it; status and plan read it)
A proxyless gRPC client ("demo-grpc-client") calls xds:///echo through the
bridge once a second; it shows on the console's Proxies page.
Point an Envoy at it (node.cluster "edge" gets the demo's listener on :8080):
  %[3]s bootstrap -node-id edge-1 -cluster edge -xds %[1]s > envoy.yaml
  envoy -c envoy.yaml
Press Ctrl-C to stop; the demo deregisters its services and stops the
agent it started.

`, s.XDS.Listen, s.Admin.Listen, bridgeBin, tokenFile)
	err = bridge.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("bridge exited: %w", err)
}

func consulAnswers(c *api.Client) bool {
	leader, err := c.Status().Leader()
	return err == nil && leader != ""
}

func startConsul(bin, addr string) (*exec.Cmd, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("consul address %q: %w", addr, err)
	}
	cmd := exec.Command(bin, "agent", "-dev", "-bind", "127.0.0.1", "-client", host, "-http-port", port, "-log-level", "warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (run `make consul` to build it): %w", bin, err)
	}
	// Stopped by run's deferred call, after the demo services deregister.
	return cmd, nil
}

func waitForLeader(ctx context.Context, c *api.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for !consulAnswers(c) {
		select {
		case <-ctx.Done():
			return errors.New("consul agent did not elect a leader within 30s")
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// startBackend serves the instance id on / and a health endpoint that can
// be failed on purpose, so the demo shows health changes reaching Envoy.
func startBackend(ctx context.Context, id string) (int, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	var failing atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, id) })
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			http.Error(w, "failing on purpose", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, _ *http.Request) {
		failing.Store(true)
		fmt.Fprintln(w, id, "now fails its health check")
	})
	mux.HandleFunc("/recover", func(w http.ResponseWriter, _ *http.Request) {
		failing.Store(false)
		fmt.Fprintln(w, id, "healthy again")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	return lis.Addr().(*net.TCPAddr).Port, nil
}
