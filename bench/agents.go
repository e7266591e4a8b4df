package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	tier, err := startAgents(ctx, filepath.Join(dir, "agents"), n/k, ups)
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
			Socket: filepath.Join(d, "agent.sock"), SocketMode: 0o600,
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
	t.cancel()
	t.wg.Wait()
}
