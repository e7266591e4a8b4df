package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// The floor's ACKs: what a bare grpc-go server (the floor server, which
// decodes and answers nothing after a stream's first request) spends per
// small message when N streams each send one a period, all at once at
// the period's start or spread evenly over it. The agent tier's central
// spends about twice as much per stream and change as the direct
// fleet's, with the same system calls, when the agents' ACKs come one at
// a time (bench/README.md, "The tier at 19,800, one connection each");
// this asks whether gRPC and Go's runtime alone do so.

// FloorACKsConfig is one measurement.
type FloorACKsConfig struct {
	Self     string // this binary; the server runs as `Self floor-server`
	N        int
	Parallel int
	Mode     Mode
	Server   string // as FloorConfig's
	Period   time.Duration
	Rounds   int
	// Spread sends the N messages of a period evenly over it; false, all
	// at once at its start.
	Spread bool
	// ServerCPUs pins the server (GOMAXPROCS = its count), ClientCPUs
	// this process, as the harness's core split; "" = no pinning.
	ServerCPUs, ClientCPUs string
}

// FloorACKsResult is the server's CPU over the rounds.
type FloorACKsResult struct {
	Messages int
	CPU      time.Duration
}

// PerMessage is the server's CPU per message.
func (r FloorACKsResult) PerMessage() time.Duration {
	return r.CPU / time.Duration(max(r.Messages, 1))
}

// RunFloorACKs starts the floor server, connects N streams, and sends
// each stream one delta ACK (or SotW request) a period for Rounds periods.
func RunFloorACKs(ctx context.Context, cfg FloorACKsConfig) (FloorACKsResult, error) {
	args := []string{cfg.Self, "floor-server", "-server", cfg.Server}
	name := args[0]
	if cfg.ServerCPUs != "" {
		name, args = "taskset", append([]string{"-c", cfg.ServerCPUs}, args...)
	} else {
		args = args[1:]
	}
	cmd := exec.CommandContext(ctx, name, args...)
	if cfg.ServerCPUs != "" {
		cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", cpuCount(cfg.ServerCPUs)))
	}
	in, _, addr, err := startFloor(cmd)
	if err != nil {
		return FloorACKsResult{}, err
	}
	defer func() { _ = in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := Repin(os.Getpid(), cfg.ClientCPUs); err != nil {
		return FloorACKsResult{}, err
	}
	streams, err := floorConnect(ctx, addr, FloorConfig{N: cfg.N, Parallel: cfg.Parallel, Mode: cfg.Mode})
	defer func() {
		for _, s := range streams {
			if s != nil {
				s.Close()
			}
		}
	}()
	if err != nil {
		return FloorACKsResult{}, err
	}
	var ack any = &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: "1"}
	if cfg.Mode == SotW {
		ack = &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, VersionInfo: "1", ResponseNonce: "1"}
	}
	time.Sleep(time.Second) // the connect's own work done
	pid := cmd.Process.Pid
	cpu0, start := ProcCPU(pid), time.Now()
	err = pace(start, len(streams), cfg.Rounds, cfg.Period, cfg.Spread, func(k int) error {
		if err := streams[k].SendMsg(ack); err != nil {
			return fmt.Errorf("stream %d: %w", k, err)
		}
		return nil
	})
	if err != nil {
		return FloorACKsResult{}, err
	}
	// The last period, then a settle for the last messages.
	sleepUntil(start.Add(time.Duration(cfg.Rounds)*cfg.Period + 200*time.Millisecond))
	cpu := ProcCPU(pid) - cpu0
	return FloorACKsResult{Messages: cfg.Rounds * len(streams), CPU: time.Duration(cpu * float64(time.Second))}, nil
}

// pace calls send for each of n streams once a period, for rounds
// periods from start: all at once at each period's start or, spread,
// stream k at k/n of the way through it.
func pace(start time.Time, n, rounds int, period time.Duration, spread bool, send func(k int) error) error {
	for r := range rounds {
		at := start.Add(time.Duration(r) * period)
		sleepUntil(at)
		for k := range n {
			if spread {
				sleepUntil(at.Add(period * time.Duration(k) / time.Duration(n)))
			}
			if err := send(k); err != nil {
				return err
			}
		}
	}
	return nil
}

// sleepUntil sleeps until t (at once if it passed).
func sleepUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}
