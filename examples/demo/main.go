// Command demo runs consul-xds-bridge against a Consul agent of its own
// with a few demo services, for `make run`. It starts a private `consul
// agent -dev` on free ports (an agent already answering on the machine,
// often the operator's own and joined to a real cluster, is left alone
// unless -consul names it), starts small HTTP backends that answer with
// their instance id and a gRPC echo service, registers them with health
// checks, runs the bridge binary with the given config pointed at that
// agent, and a proxyless gRPC client calling the echo service through it,
// until interrupted. One demo runs at a time; it exits non-zero when the
// bridge cannot start, and deregisters exactly what it registered.
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
	consulBin := flag.String("consul-bin", "consul", "consul binary to start the demo's own agent with")
	useConsul := flag.String("consul", "", "use the Consul agent at this HOST:PORT instead of starting one (the demo registers its services there and deregisters exactly those on exit)")
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
	if err := run(*consulBin, *useConsul, *bridgeBin, *config); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// demoServices are registered with these instance counts.
var demoServices = []struct {
	name      string
	instances int
}{{"web", 3}, {"api", 2}}

func run(consulBin, useConsul, bridgeBin, config string) error {
	unlock, err := lockDemo()
	if err != nil {
		return err
	}
	defer unlock()
	cfg, _, diags := policy.LoadFiles(config)
	if diags.HasErrors() {
		return fmt.Errorf("%s: %s", config, diags.Error())
	}
	s := cfg.Settings
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	addr := useConsul
	if addr == "" {
		configured := s.Consul.Address
		if configured == "" {
			configured = "127.0.0.1:8500"
		}
		if consulAnswers(newClient(configured)) {
			fmt.Printf("a Consul agent answers at %s: the demo leaves it alone and runs its own (pass -consul %s to use that one)\n", configured, configured)
		}
		agent, agentAddr, err := startConsul(consulBin)
		if err != nil {
			return err
		}
		defer func() {
			_ = agent.Process.Signal(syscall.SIGTERM)
			_ = agent.Wait()
		}()
		addr = agentAddr
	}
	client := newClient(addr)
	if err := waitForLeader(ctx, client); err != nil {
		return fmt.Errorf("consul agent at %s: %w", addr, err)
	}
	if useConsul != "" {
		// Never take over what is there: a registration with one of the
		// demo's IDs is someone else's (or another demo's).
		if taken, err := takenIDs(client); err != nil {
			return fmt.Errorf("consul agent at %s: %w", addr, err)
		} else if len(taken) > 0 {
			return fmt.Errorf("the Consul agent at %s already has services with the demo's IDs %v; the demo does not take them over", addr, taken)
		}
		fmt.Printf("using the Consul agent at http://%s\n", addr)
	} else {
		fmt.Printf("started the demo's own consul agent -dev at http://%s (UI at /ui)\n", addr)
	}
	config, err = withConsulAddress(config, addr)
	if err != nil {
		return err
	}
	defer os.Remove(config)

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
	exited := make(chan error, 1)
	go func() { exited <- bridge.Wait() }()
	// "Running" below must be true when it is printed: the admin token
	// file it names exists once the admin API answers, and /readyz says
	// the bridge serves its first Consul sync.
	if err := waitReady(ctx, "http://"+s.Admin.Listen+"/readyz", 60*time.Second, exited); err != nil {
		if ctx.Err() != nil { // Ctrl-C while the bridge started: a clean stop
			<-exited
			return nil
		}
		stop()
		return fmt.Errorf("the bridge did not become ready (its log is above): %w", err)
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
	err = <-exited
	if ctx.Err() != nil {
		return nil
	}
	// The bridge ended by itself (it could not bind, say): stop the rest
	// (the gRPC client, the backends) so the demo exits, non-zero.
	stop()
	return fmt.Errorf("bridge exited: %w", err)
}

func newClient(addr string) *api.Client {
	c := api.DefaultConfig()
	c.Address = addr
	// Our own transport: the operator's CONSUL_* TLS settings do not
	// apply to the demo's agent.
	c.Transport = http.DefaultTransport.(*http.Transport).Clone()
	client, _ := api.NewClient(c) // fails only on a bad TLS config, which this has none of
	return client
}

func consulAnswers(c *api.Client) bool {
	leader, err := c.Status().Leader()
	return err == nil && leader != ""
}

// consulPorts are the agent's ports, every one chosen free: a dev agent
// on Consul's default ports would collide with an agent already on the
// machine (serf, server RPC, DNS, gRPC), not only on HTTP.
var consulPorts = []string{"http-port", "dns-port", "grpc-port", "grpc-tls-port", "serf-lan-port", "serf-wan-port", "server-port"}

// startConsul starts the demo's own dev agent on free loopback ports and
// returns its HTTP address.
func startConsul(bin string) (*exec.Cmd, string, error) {
	args := []string{"agent", "-dev", "-bind", "127.0.0.1", "-client", "127.0.0.1", "-log-level", "warn"}
	var held []net.Listener
	ports := map[string]int{}
	for _, p := range consulPorts {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", err
		}
		held = append(held, ln)
		ports[p] = ln.Addr().(*net.TCPAddr).Port
		args = append(args, "-"+p, strconv.Itoa(ports[p]))
	}
	for _, ln := range held {
		ln.Close()
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s (run `make consul` to build it): %w", bin, err)
	}
	// Stopped by run's deferred call, after the demo services deregister.
	return cmd, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports["http-port"])), nil
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

// waitReady polls url until it answers 200, for at most within, or until
// the bridge exits (exited: its Wait's error, which is put back for the
// caller).
func waitReady(ctx context.Context, url string, within time.Duration, exited chan error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	last := "no answer"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else if ctx.Err() == nil {
			last = err.Error()
		}
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("bridge exited: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("%s after %s: %s", url, within, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
