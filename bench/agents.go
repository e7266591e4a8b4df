package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
)

// The agent tier (issue 40): servers "agents" and "agents-2" in -compare
// put the per-VM agent between the central bridge and the proxies, as
// fleets at scale are meant to run. N/K agents (Options.AgentProxies = K)
// run in this process with the real agent code (agent.New, the same
// relay, cache and serve path as the binary), each on a Unix socket of
// its own, and relay one upstream stream per node.cluster to the central
// bridge; K simulated proxies connect to each agent's socket. The
// central bridge then serves N/K streams, not N, and its CPU and memory
// per change (the rows' server columns: the central process only) are
// what the tier saves. "agents-2" gives every agent both replicas of the
// central bridge, of which it uses one, as a fleet's agents would.
//
// The agents share the load generator's cores: a flip's latency through
// them includes their relay and re-serve on those cores, which on a VM is
// each agent's own. An agent's K proxies share one connection to its
// socket (harness.go): this process holds both ends of every socket.
//
// With Options.AgentsNice set, the agents run in a process of their own
// (`xds-load agents-server`) at that niceness instead, on the same CPUs,
// so the kernel runs them ahead of this process's simulated proxies, as
// a fleet's agents answer the central on their own VMs whatever other
// VMs' proxies do. It was built to see whether sharing a process with
// the proxies was what held the agents' ACKs to the central back: it was
// not (bench/README.md, "The relay ACKs before it relays").

// startAgentTier starts server ("agents": one central bridge; "agents-2":
// two replicas) and n/K agents relaying to it.
func startAgentTier(ctx context.Context, o *Options, server, dir, consulAddr, pol string, n int) (*Target, []*Target, *agentTier, error) {
	var (
		t        *Target
		replicas []*Target
		err      error
	)
	if server == "agents" {
		t, err = StartBridge(ctx, o.BridgeBin, dir, consulAddr, pol, o.ServerCPUs, cpuCount(o.ServerCPUs), o.BridgeLogLevel, o.BridgeXDS...)
	} else {
		t, replicas, err = startReplicas(ctx, o, dir, consulAddr, pol)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	t.Name = server
	all := append([]*Target{t}, replicas...)
	var ups []string
	for _, rt := range all {
		ups = append(ups, rt.XDSAddr)
	}
	k := max(o.AgentProxies, 1)
	o.logf("compare %s N=%d: starting %d agents of %d proxies each", server, n, n/k, k)
	var tier *agentTier
	if o.AgentsNice != "" {
		tier, err = startAgentsProcess(o, filepath.Join(dir, "agents"), n/k, ups)
	} else {
		tier, err = startAgents(ctx, filepath.Join(dir, "agents"), n/k, ups)
	}
	if err != nil {
		for _, rt := range all {
			rt.Stop()
		}
		return nil, nil, nil, err
	}
	return t, replicas, tier, nil
}

// agentTier is the agents of one run.
type agentTier struct {
	sockets []string // "unix://" addresses, one per agent
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	// proc is the agents' own process (Options.AgentsNice), nil when they
	// run in this one; in is its stdin, whose end stops it.
	proc *exec.Cmd
	in   io.Closer
}

// pid is the agents' process, or 0 when they run in this one.
func (t *agentTier) pid() int {
	if t == nil || t.proc == nil {
		return 0
	}
	return t.proc.Process.Pid
}

// startAgents starts m agents under dir, each relaying to upstreams.
func startAgents(ctx context.Context, dir string, m int, upstreams []string) (*agentTier, error) {
	if m < 1 {
		return nil, errors.New("the agent tier needs at least one agent (N ≥ -agent-proxies)")
	}
	actx, cancel := context.WithCancel(ctx)
	tier := &agentTier{cancel: cancel}
	errs := make(chan error, m)
	for i := range m {
		d := filepath.Join(dir, fmt.Sprintf("agent-%d", i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			tier.stop()
			return nil, err
		}
		cfg := &agent.Config{
			NodeID:  fmt.Sprintf("bench-vm-%d", i),
			DataDir: filepath.Join(d, "data"), AllowGroups: []string{"*"}, AllowNodeIDs: []string{"*"},
			Socket: agentSocket(dir, i), SocketMode: 0o600,
			Upstreams: upstreams, AdminListen: "127.0.0.1:0",
			BackoffInitial: 100 * time.Millisecond, BackoffMax: 2 * time.Second,
		}
		a := agent.New(cfg, zerolog.Nop())
		tier.wg.Add(1)
		go func() {
			defer tier.wg.Done()
			if err := a.Run(actx); err != nil && actx.Err() == nil {
				errs <- fmt.Errorf("agent %s: %w", cfg.NodeID, err)
			}
		}()
		select {
		case <-a.Started():
		case err := <-errs:
			tier.stop()
			return nil, err
		case <-time.After(30 * time.Second):
			tier.stop()
			return nil, fmt.Errorf("agent %s did not start within 30s", cfg.NodeID)
		}
		tier.sockets = append(tier.sockets, "unix://"+cfg.Socket)
	}
	return tier, nil
}

// addrOf is the socket proxy k connects to: k proxies per agent, in
// order (proxy k on agent k/perAgent).
func (t *agentTier) addrOf(perAgent int) func(k int) string {
	return func(k int) string { return t.sockets[(k/perAgent)%len(t.sockets)] }
}

func (t *agentTier) stop() {
	if t.proc != nil {
		_ = t.in.Close() // ServeAgents stops its agents and returns
		done := make(chan error, 1)
		go func() { done <- t.proc.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = t.proc.Process.Kill()
			<-done
		}
		return
	}
	t.cancel()
	t.wg.Wait()
}

// startAgentsProcess starts m agents under dir in `xds-load
// agents-server`, pinned to the load generator's CPUs at niceness
// o.AgentsNice (below 0 needs root or CAP_SYS_NICE).
func startAgentsProcess(o *Options, dir string, m int, upstreams []string) (*agentTier, error) {
	args := []string{"-n", o.AgentsNice}
	if o.ClientCPUs != "" {
		args = append(args, "taskset", "-c", o.ClientCPUs)
	}
	args = append(args, o.Self, "agents-server", "-dir", dir, "-m", strconv.Itoa(m), "-upstreams", strings.Join(upstreams, ","))
	cmd := exec.Command("nice", args...)
	if o.ClientCPUs != "" {
		cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", cpuCount(o.ClientCPUs)))
	}
	in, out, line, err := startFloor(cmd)
	if err != nil {
		return nil, fmt.Errorf("agents process: %w", err)
	}
	tier := &agentTier{proc: cmd, in: in, cancel: func() {}}
	if line != "ready" {
		tier.stop()
		return nil, fmt.Errorf("agents process: %s", line)
	}
	// nice(1) runs the command anyway when it may not set the niceness
	// (below 0 without root): a run must not claim a priority it lacks.
	if got, err := ProcNice(cmd.Process.Pid); err != nil || strconv.Itoa(got) != strings.TrimPrefix(o.AgentsNice, "+") {
		tier.stop()
		return nil, fmt.Errorf("agents process runs at niceness %d, not %s (%v; below 0 needs root or CAP_SYS_NICE)", got, o.AgentsNice, err)
	}
	go func() {
		for out.Scan() { // drain: the process prints nothing more
		}
	}()
	for i := range m {
		tier.sockets = append(tier.sockets, "unix://"+agentSocket(dir, i))
	}
	return tier, nil
}

// ServeAgents runs m agents under dir relaying to upstreams (`xds-load
// agents-server`, started by startAgentsProcess): it writes "ready" to w
// once every agent listens, or the error, and stops them when r ends.
func ServeAgents(ctx context.Context, dir string, m int, upstreams []string, r io.Reader, w io.Writer) error {
	tier, err := startAgents(ctx, dir, m, upstreams)
	if err != nil {
		fmt.Fprintln(w, "cannot start the agents: "+strings.ReplaceAll(err.Error(), "\n", " "))
		return err
	}
	defer tier.stop()
	fmt.Fprintln(w, "ready")
	_, _ = io.Copy(io.Discard, r)
	return nil
}

// AgentsServer is `xds-load agents-server ARGS`: ServeAgents over stdin
// and stdout, as startAgentsProcess starts it.
func AgentsServer(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("agents-server", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for the agents' sockets and data")
	m := fs.Int("m", 1, "agents")
	ups := fs.String("upstreams", "", "central bridge xDS addresses, ','-separated")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *ups == "" {
		return errors.New("-dir and -upstreams are required")
	}
	return ServeAgents(ctx, *dir, *m, strings.Split(*ups, ","), os.Stdin, os.Stdout)
}

func agentSocket(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("agent-%d", i), "agent.sock")
}
