// Package bench is the fleet-scale load harness: N simulated Envoys in one
// process against the bridge, a baseline go-control-plane server and
// Consul's own xDS server, all fed by a real Consul agent.
//
// See bench/README.md for what each scenario measures and the latest
// results; cmd/xds-load is the runnable.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Options configure a harness run.
type Options struct {
	ConsulBin string // consul binary (v1.15.x)
	BridgeBin string // consul-xds-bridge binary
	// BaseBridgeBin is a second bridge binary (another commit's) that the
	// comparison runs as server "base", so a change is measured against
	// the code before it in the same run, on the same Consul.
	BaseBridgeBin string
	Self          string // this binary, for `baseline-server`
	Dir           string // scratch dir for configs and logs

	Services  int // S: services in the catalog
	Instances int // I: instances per service
	Upstreams int // services routed by the policy / upstreams per peer sidecar
	// Background services (of BackgroundInstances each) are registered
	// after the world: a catalog no proxy follows. With any, the
	// comparison's bridges export every service (they watch and build
	// them all) while their proxies' group still reaches the routed ones.
	Background, BackgroundInstances int
	// FollowOne is the follow-one world of the comparison (followone.go):
	// proxy k follows routed service k mod Upstreams only, and flips go
	// round the routed services.
	FollowOne bool
	// CompareScenarios are the scenarios the comparison runs after S3:
	// "s1", "s2", "s4" (idle), "s6", "s9" (back-to-back flips); nil: s1, s2, s6.
	CompareScenarios []string

	FleetSizes   []int // N for the bridge fleet scenarios (S1–S7)
	GroupSizes   []int // N for the groups phase (S3, S8; groups.go)
	GroupProxies int   // proxies per group in the groups phase
	CompareSizes []int // N for the bridge/baseline/peer comparison (S1, S2, S3, S6)
	// AgentProxies is K, the proxies behind each agent of the agent tier
	// (servers "agents" and "agents-2": N/K agents, agents.go).
	AgentProxies int
	// AgentsNice, when set, runs the agent tier in a process of its own
	// at this niceness (agents.go); "" runs it in this process.
	AgentsNice string
	Compare    []string // "bridge/sotw", "bridge/delta", "bridge-fixed/delta", "baseline/sotw", "baseline/delta", "peer/delta"

	S1Flips, S2Flips int
	CompareS2Flips   int // S2 flips in the comparison (0: S2Flips)
	// S2Profile, when set, names a directory that receives a CPU profile
	// of the server under test taken while S2 flips (S2 keeps flipping
	// until the profile is done, so it covers flips only), and one taken
	// from the start of the S6 reconnect storm; heap profiles at the end
	// of S3 (connected, no change yet) and before and after S2; and the
	// live heap per proxy after S3 and after S1 (two collections made).
	S2Profile      string
	BridgeLogLevel string
	FlipGap        time.Duration // pause between S1 flips
	FlipTimeout    time.Duration
	SyncTimeout    time.Duration
	Settle         time.Duration
	IdleTime       time.Duration
	StormTime      time.Duration
	StormRate      int // flips per second
	// NoListeners: the bridge fleet's proxies take clusters and
	// endpoints only (static listeners), as many VM Envoys do.
	NoListeners     bool
	HoldOff         time.Duration
	MaxDelay        time.Duration
	ConnectParallel int
	// StreamsPerConn puts this many simulated proxies' ADS streams on one
	// gRPC connection (1: a connection each, as Envoy). Beyond ~19,000
	// connections the process runs out of file descriptors (the hard
	// limit here is 20,000), so 20,000 proxies need 2 or more.
	StreamsPerConn int
	// SharedDecode: FleetConfig.SharedDecode for every fleet.
	SharedDecode bool
	// EnvoyNode: FleetConfig.EnvoyNode for every fleet.
	EnvoyNode bool
	// H2: FleetConfig.H2 for every fleet.
	H2 bool
	// BridgeXDS are extra lines for every bridge's xds block (settings
	// other than the defaults, e.g. "max_initial_syncs = 500").
	BridgeXDS []string

	ServerCPUs string // taskset list for the server under test, "" = no pinning
	ClientCPUs string // for this process and the backing Consul
	// PeerXDSRate sets Consul's xds.update_max_per_second; 0 keeps Consul's default (250).
	PeerXDSRate int

	Out io.Writer
	Log io.Writer
}

// QuickOptions are the `make bench` defaults: N = 100 and 1000, short runs.
func QuickOptions() Options {
	return Options{
		Services: 100, Instances: 10, Upstreams: 10,
		FleetSizes: []int{100, 1000},
		GroupSizes: []int{1000}, GroupProxies: 50,
		CompareSizes: []int{1000},
		Compare:      []string{"bridge/sotw", "bridge/delta", "baseline/sotw", "baseline/delta", "peer/delta"},
		S1Flips:      10, S2Flips: 50, CompareS2Flips: 20, BridgeLogLevel: "warn",
		FlipGap: 300 * time.Millisecond, FlipTimeout: 60 * time.Second, SyncTimeout: 180 * time.Second,
		Settle: time.Second, IdleTime: 10 * time.Second, StormTime: 15 * time.Second, StormRate: 20,
		HoldOff: 100 * time.Millisecond, MaxDelay: time.Second, ConnectParallel: 100,
		ServerCPUs: "0", ClientCPUs: "1",
	}
}

// FullOptions are the `make bench-full` defaults: up to 5k proxies.
func FullOptions() Options {
	o := QuickOptions()
	o.Services, o.Instances = 500, 10
	o.FleetSizes = []int{100, 1000, 5000}
	o.GroupSizes = []int{1000, 5000}
	o.CompareSizes = []int{100, 1000}
	o.IdleTime, o.StormTime = 30*time.Second, 60*time.Second
	o.CompareS2Flips = 50
	o.SyncTimeout = 600 * time.Second
	return o
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
}

// Run executes every configured phase and returns the table rows.
func Run(ctx context.Context, o Options) ([]Row, error) {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	if o.ClientCPUs != "" {
		if err := Repin(os.Getpid(), o.ClientCPUs); err != nil {
			o.logf("cannot pin the load generator (%v); running unpinned", err)
			o.ServerCPUs, o.ClientCPUs = "", ""
		} else {
			runtime.GOMAXPROCS(cpuCount(o.ClientCPUs))
		}
	}
	o.logf("core split: server under test on CPUs %q (GOMAXPROCS=%d), load generator and backing Consul on %q (GOMAXPROCS=%d)",
		o.ServerCPUs, cpuCount(o.ServerCPUs), o.ClientCPUs, runtime.GOMAXPROCS(0))

	hcl := ""
	if o.PeerXDSRate > 0 {
		hcl = fmt.Sprintf("xds {\n  update_max_per_second = %d\n}\n", o.PeerXDSRate)
	}
	c, err := StartConsul(ctx, o.ConsulBin, o.Dir, hcl, o.ClientCPUs)
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	start := time.Now()
	if err := c.RegisterWorld(ctx, World{Services: o.Services, Instances: o.Instances}, o.Upstreams); err != nil {
		return nil, fmt.Errorf("register world: %w", err)
	}
	o.logf("registered %d services × %d instances in %s (%d writes; the %d routed services Connect-native)", o.Services, o.Instances, time.Since(start).Round(time.Millisecond), c.writes, o.Upstreams)
	if o.Background > 0 {
		start = time.Now()
		if err := c.RegisterServices(ctx, o.Services, o.Services+o.Background, max(o.BackgroundInstances, 1)); err != nil {
			return nil, fmt.Errorf("register background services: %w", err)
		}
		o.logf("registered %d background services × %d instances in %s", o.Background, max(o.BackgroundInstances, 1), time.Since(start).Round(time.Millisecond))
	}

	var rows []Row
	emit := func(r Row) {
		if r.steal != "" {
			r.Notes += "; " + r.steal
		}
		rows = append(rows, r)
		o.logf("%s", r.String())
	}
	if len(o.FleetSizes) > 0 {
		if err := fleetPhase(ctx, &o, c, emit); err != nil {
			return rows, err
		}
	}
	if len(o.GroupSizes) > 0 {
		if err := groupsPhase(ctx, &o, c, emit); err != nil {
			return rows, err
		}
	}
	if len(o.CompareSizes) > 0 && len(o.Compare) > 0 {
		if err := comparePhase(ctx, &o, c, emit); err != nil {
			return rows, err
		}
	}
	return rows, nil
}

func cpuCount(list string) int {
	if list == "" {
		return runtime.NumCPU()
	}
	n := 0
	for _, part := range strings.Split(list, ",") {
		var a, b int
		if k, _ := fmt.Sscanf(part, "%d-%d", &a, &b); k == 2 {
			n += b - a + 1
		} else {
			n++
		}
	}
	return max(n, 1)
}

// fleetPhase runs S1–S7 against the bridge serving every catalog service
// to a mixed fleet: half SotW, half delta; half of each in a sidecar-like
// group (routes to the routed services, and gets only those clusters),
// half in an edge group with export_all_services (every cluster). Every
// client asks for the endpoints of every cluster it gets, as Envoy does.
func fleetPhase(ctx context.Context, o *Options, c *Consul, emit func(Row)) error {
	dir := filepath.Join(o.Dir, "fleet")
	os.MkdirAll(dir, 0o755)
	t, err := StartBridge(ctx, o.BridgeBin, dir, c.HTTPAddr, FleetPolicy(o.Upstreams), o.ServerCPUs, cpuCount(o.ServerCPUs), o.BridgeLogLevel, o.BridgeXDS...)
	if err != nil {
		return fmt.Errorf("start bridge: %w", err)
	}
	defer t.Stop()
	narrow := func(k int) bool { return (k/2)%2 == 1 }
	cfg := FleetConfig{
		StreamsPerConn: o.StreamsPerConn, SharedDecode: o.SharedDecode, EnvoyNode: o.EnvoyNode, H2: o.H2,
		Addr: t.XDSAddr, NodeID: t.NodeID, HoldOff: o.HoldOff,
		ClusterOf: func(k int) string {
			if narrow(k) {
				return t.Cluster
			}
			return t.Cluster + "-edge"
		},
		Mode:        func(k int) Mode { return Mode(k % 2) },
		Narrow:      narrow,
		NoListeners: o.NoListeners,
	}
	extra := o.Services
	for _, n := range o.FleetSizes {
		r := &run{opts: o, consul: c, t: t, mode: "mixed", n: n, health: map[[2]int]string{}}
		o.logf("fleet N=%d: connecting", n)
		row, err := r.s3(ctx, cfg, o.ConnectParallel)
		emit(row)
		if err != nil {
			if r.f != nil {
				r.f.Close()
			}
			continue
		}
		emit(r.s4idle(ctx))
		emit(r.s1(ctx))
		emit(r.s2(ctx))
		s5, s4 := r.s5(ctx)
		emit(s4)
		emit(s5)
		emit(r.s7(ctx, extra))
		extra++
		emit(r.s6(ctx, cfg))
		if err := r.f.Errors(); err != nil {
			o.logf("fleet N=%d: stream errors: %v", n, err)
		}
		r.f.Close()
		resetHealth(ctx, c, r.health)
	}
	return nil
}

// resetHealth puts every flipped instance back to passing.
func resetHealth(ctx context.Context, c *Consul, h map[[2]int]string) {
	var ids [][2]int
	var sts []string
	for k, st := range h {
		if st != "passing" {
			ids = append(ids, k)
			sts = append(sts, "passing")
		}
	}
	for len(ids) > 0 {
		n := min(len(ids), maxTxnOps)
		_ = c.SetHealthMany(ctx, ids[:n], sts[:n])
		ids, sts = ids[n:], sts[n:]
	}
}

// comparePhase runs S3, S1, S2 and S6 against each server with the same
// served configuration: Upstreams clusters per proxy.
func comparePhase(ctx context.Context, o *Options, c *Consul, emit func(Row)) error {
	peerSidecars := 0
	scenarios := o.CompareScenarios
	if scenarios == nil {
		scenarios = []string{"s1", "s2", "s6"}
	}
	for _, n := range o.CompareSizes {
		// A server may be listed more than once (A, B, A, B: interleaved
		// runs on a shared machine); each run has a directory of its own.
		for pos, which := range o.Compare {
			server, modeName, _ := strings.Cut(which, "/")
			mode := SotW
			if modeName == "delta" {
				mode = Delta
			}
			dir := filepath.Join(o.Dir, fmt.Sprintf("compare-%s-%s-%d-%d", server, modeName, n, pos))
			os.MkdirAll(dir, 0o755)
			pol := Policy(o.Background > 0, o.Upstreams)
			if o.FollowOne {
				pol = FollowOnePolicy(o.Background > 0, o.Upstreams)
			}
			var (
				t        *Target
				replicas []*Target
				tier     *agentTier
				err      error
			)
			switch server {
			case "bridge":
				t, err = StartBridge(ctx, o.BridgeBin, dir, c.HTTPAddr, pol, o.ServerCPUs, cpuCount(o.ServerCPUs), o.BridgeLogLevel, o.BridgeXDS...)
			case "base": // the same bridge settings, another build (BaseBridgeBin)
				if o.BaseBridgeBin == "" {
					err = fmt.Errorf("server base needs -base-bridge")
					break
				}
				t, err = StartBridge(ctx, o.BaseBridgeBin, dir, c.HTTPAddr, pol, o.ServerCPUs, cpuCount(o.ServerCPUs), o.BridgeLogLevel, o.BridgeXDS...)
				if t != nil {
					t.Name = "base"
				}
			case "bridge-2": // two replicas, the fleet split between them (replicas.go)
				t, replicas, err = startReplicas(ctx, o, dir, c.HTTPAddr, pol)
			case "agents", "agents-2": // the agent tier in front of one bridge or two replicas (agents.go)
				t, replicas, tier, err = startAgentTier(ctx, o, server, dir, c.HTTPAddr, pol, n)
			case "bridge-fixed": // the bridge with a fixed 100ms debounce window: the adaptive window's baseline
				t, err = StartBridge(ctx, o.BridgeBin, dir, c.HTTPAddr, pol, o.ServerCPUs, cpuCount(o.ServerCPUs), o.BridgeLogLevel, append([]string{"debounce_adaptive = false"}, o.BridgeXDS...)...)
			case "baseline":
				t, err = StartBaseline(ctx, o.Self, dir, c.HTTPAddr, pol, o.ServerCPUs, cpuCount(o.ServerCPUs))
			case "peer":
				if mode != Delta {
					err = fmt.Errorf("Consul 1.15 serves xDS v3 only as delta ADS")
					break
				}
				if n > peerSidecars {
					o.logf("peer: registering sidecars %d..%d with %d upstreams each", peerSidecars, n-1, o.Upstreams)
					if err = c.RegisterSidecars(ctx, n, o.Upstreams, o.FollowOne, 16); err == nil {
						peerSidecars = n
					}
				}
				t = PeerTarget(c)
				if err == nil {
					err = Repin(c.PID(), o.ServerCPUs)
				}
			default:
				err = fmt.Errorf("unknown server %q", server)
			}
			if err != nil {
				emit(Row{Scenario: "compare", Server: server, Mode: modeName, N: n, Failed: true, P50: -1, P99: -1, Max: -1, ConsulReqs: -1, Notes: "FAILED: " + err.Error()})
				continue
			}
			o.logf("compare %s N=%d: connecting", which, n)
			r := &run{opts: o, consul: c, t: t, replicas: replicas, tier: tier, mode: modeName, n: n, health: map[[2]int]string{}}
			cfg := FleetConfig{StreamsPerConn: o.StreamsPerConn, SharedDecode: o.SharedDecode, EnvoyNode: o.EnvoyNode, H2: o.H2, Addr: t.XDSAddr, NodeID: t.NodeID, Cluster: t.Cluster, HoldOff: o.HoldOff,
				Mode: func(int) Mode { return mode }}
			if o.FollowOne && server != "peer" && server != "baseline" {
				// The baseline serves one snapshot to every node; the
				// peer's sidecars each have their one upstream.
				cfg.ClusterOf = func(k int) string { return followGroup(r.followed(k)) }
			}
			emitR := emit
			if tier != nil {
				// An agent's K proxies share one connection to its socket:
				// both ends of every socket are in this process, whose
				// descriptors (20,000 here) would not hold 2,000 agents'
				// 20,000 connections twice. The agent serves the same
				// streams; the central bridge sees nothing of it.
				k := max(o.AgentProxies, 1)
				cfg.AddrOf, cfg.StreamsPerConn, cfg.H2 = tier.addrOf(k), k, false
			}
			if len(replicas) > 0 {
				// The agents pick their replica themselves.
				if tier == nil {
					for _, rt := range r.targets() {
						cfg.Addrs = append(cfg.Addrs, rt.XDSAddr)
					}
				}
				emitR = func(row Row) {
					if row.perReplica != "" {
						row.Notes += "; " + row.perReplica
					}
					emit(row)
				}
			}
			row, err := r.s3(ctx, cfg, o.ConnectParallel)
			if err == nil && len(replicas) > 0 && tier == nil {
				row.Notes += "; " + sameVersions(r.f)
			}
			emitR(row)
			for _, sc := range scenarios {
				if err != nil {
					break
				}
				switch sc {
				case "s1":
					emitR(r.s1(ctx))
				case "s2":
					emitR(r.s2(ctx))
				case "s6":
					emitR(r.s6(ctx, cfg))
				case "s9":
					emitR(r.s9(ctx))
				case "s4":
					emitR(r.s4idle(ctx))
				}
			}
			if r.f != nil {
				r.f.Close()
			}
			if tier != nil {
				tier.stop()
			}
			resetHealth(ctx, c, r.health)
			if server == "peer" {
				_ = Repin(c.PID(), o.ClientCPUs)
				// Consul is also the backing catalog: the next server's
				// rows would otherwise pay for its own proxies' leftover
				// work (GC of a heap in GiB) in Consul's answers and on
				// the load generator's core.
				o.logf("peer N=%d: Consul quiet after %s", n, waitQuiet(ctx, c.PID(), 60*time.Second).Round(time.Second))
			} else {
				t.Stop()
			}
			for _, rt := range replicas {
				rt.Stop()
			}
			time.Sleep(time.Second)
		}
	}
	return nil
}

// waitQuiet waits until process pid has used under 5 % of a core in each
// of three seconds in a row, or for at most limit, and returns how long it
// waited. One quiet second was not enough: after a peer row Consul's
// leftover work comes in bursts (a bridge row right after it still met
// answers 150–350 ms late).
func waitQuiet(ctx context.Context, pid int, limit time.Duration) time.Duration {
	start := time.Now()
	for quiet := 0; quiet < 3 && time.Since(start) < limit && ctx.Err() == nil; {
		cpu0 := ProcCPU(pid)
		time.Sleep(time.Second)
		if ProcCPU(pid)-cpu0 < 0.05 {
			quiet++
		} else {
			quiet = 0
		}
	}
	return time.Since(start)
}

// String renders a row for the progress log.
func (r Row) String() string {
	return fmt.Sprintf("%s | %s/%s N=%d | p50 %s p99 %s max %s | cpu %.2fs | peak %s | %s | consul %s | %s",
		r.Scenario, r.Server, r.Mode, r.N, ms(r.P50), ms(r.P99), ms(r.Max), r.CPU, bytesStr(float64(r.PeakRSS)),
		bytesStr(float64(r.Bytes)), reqs(r.ConsulReqs), r.Notes)
}

func reqs(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f", v)
}
