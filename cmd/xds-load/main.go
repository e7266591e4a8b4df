// Command xds-load is the fleet-scale load harness (see bench/README.md):
//
//	xds-load run [-full] [flags]       run the scenarios and print the table
//	xds-load baseline-server [flags]   the baseline go-control-plane server (started by run)
//	xds-load floor [flags]             a bare grpc-go server's memory per connection
//	xds-load floor-server [flags]      that server (started by floor)
//	xds-load floor-acks [flags]        a bare grpc-go server's CPU per ACK, bunched or spread
//	xds-load agents-server [flags]     the agent tier in a process of its own (started by run with -agents-nice)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/bench"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: xds-load run [flags] | xds-load baseline-server [flags] | xds-load floor [flags] | xds-load floor-acks [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch os.Args[1] {
	case "run":
		os.Exit(runCmd(ctx, os.Args[2:]))
	case "baseline-server":
		os.Exit(baselineCmd(ctx, os.Args[2:]))
	case "floor":
		os.Exit(floorCmd(ctx, os.Args[2:]))
	case "floor-acks":
		os.Exit(floorACKsCmd(ctx, os.Args[2:]))
	case "floor-server":
		os.Exit(floorServerCmd(ctx, os.Args[2:]))
	case "agents-server":
		os.Exit(agentsServerCmd(ctx, os.Args[2:]))
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func ints(s string) []int {
	var out []int
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bad number %q\n", p)
			os.Exit(2)
		}
		out = append(out, n)
	}
	return out
}

func join(v []int) string {
	var s []string
	for _, n := range v {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, ",")
}

func runCmd(ctx context.Context, args []string) int {
	full := false
	for _, a := range args {
		if a == "-full" || a == "--full" {
			full = true
		}
	}
	o := bench.QuickOptions()
	if full {
		o = bench.FullOptions()
	}
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	fs.Bool("full", full, "full mode: N up to 5000, longer runs")
	fs.StringVar(&o.ConsulBin, "consul", ".tools/bin/consul", "consul binary (v1.15)")
	fs.StringVar(&o.BridgeBin, "bridge", "bin/consul-xds-bridge", "consul-xds-bridge binary")
	fs.StringVar(&o.BaseBridgeBin, "base-bridge", "", "a second consul-xds-bridge binary (e.g. built from main) the comparison runs as server \"base\" (-compare base/delta,...)")
	fs.IntVar(&o.Background, "background-services", 0, "services registered after the world that no proxy follows (the comparison's bridges then export every service)")
	fs.BoolVar(&o.FollowOne, "follow-one", false, "comparison world where proxy k follows routed service k mod -upstreams only (a group each) and flips go round the routed services (issue 40's world)")
	fs.IntVar(&o.BackgroundInstances, "background-instances", 5, "instances per background service")
	compareScenarios := fs.String("compare-scenarios", "s1,s2,s6", "scenarios the comparison runs after S3: s1, s2, s4 (idle: Consul requests and server CPU per second), s6, s9 (back-to-back flips)")
	fs.DurationVar(&o.FlipGap, "flip-gap", o.FlipGap, "pause before each S1 flip (1s: a flip after a quiet second)")
	fs.StringVar(&o.Dir, "dir", "", "scratch dir for configs and logs (default: a new temp dir)")
	fs.IntVar(&o.Services, "services", o.Services, "S: services in the catalog")
	fs.IntVar(&o.Instances, "instances", o.Instances, "I: instances per service")
	fs.IntVar(&o.Upstreams, "upstreams", o.Upstreams, "services routed by the policy; upstreams per peer sidecar; clusters per proxy in the comparison")
	sizes := fs.String("n", join(o.FleetSizes), "fleet sizes for the bridge scenarios S1–S7 (empty: skip)")
	gsizes := fs.String("groups-n", join(o.GroupSizes), "fleet sizes for the groups phase: sidecar-like groups of 10 routed services (S3, S8; empty: skip)")
	fs.IntVar(&o.GroupProxies, "group-proxies", o.GroupProxies, "proxies per group in the groups phase")
	csizes := fs.String("compare-n", join(o.CompareSizes), "fleet sizes for the bridge/baseline/peer comparison (empty: skip)")
	compare := fs.String("compare", strings.Join(o.Compare, ","), "servers/modes to compare: bridge, base, bridge-2 (two replicas), bridge-fixed, baseline, peer, agents and agents-2 (the agent tier in front of one bridge or two replicas)")
	fs.IntVar(&o.AgentProxies, "agent-proxies", 10, "K: proxies behind each agent of the agent tier (-compare agents/...: N/K agents in this process, real agent code)")
	fs.StringVar(&o.AgentsNice, "agents-nice", "", "run the agent tier in a process of its own at this niceness (e.g. -10; below 0 needs root), on -client-cpus ahead of the simulated proxies, as a fleet's agents answer the central on their own VMs; empty: in this process")
	fs.IntVar(&o.S1Flips, "s1-flips", o.S1Flips, "S1 flips")
	fs.IntVar(&o.S2Flips, "s2-flips", o.S2Flips, "S2 flips (fleet)")
	fs.IntVar(&o.CompareS2Flips, "compare-s2-flips", o.CompareS2Flips, "S2 flips in the comparison (0: -s2-flips)")
	fs.StringVar(&o.S2Profile, "s2-profile", "", "directory for CPU profiles of the bridge taken during S2 and S9 (each flips until it is done), from the start of the S6 reconnect storm, and over the last 15 s of S4 (when -idle is at least that)")
	fs.StringVar(&o.BridgeLogLevel, "bridge-log", o.BridgeLogLevel, "bridge log level (logs in -dir)")
	fs.DurationVar(&o.IdleTime, "idle", o.IdleTime, "S4 idle measurement time")
	fs.DurationVar(&o.StormTime, "storm", o.StormTime, "S5 storm duration")
	fs.IntVar(&o.StormRate, "storm-rate", o.StormRate, "S5 flips per second")
	fs.StringVar(&o.ServerCPUs, "server-cpus", o.ServerCPUs, "CPUs for the server under test (taskset list; empty: no pinning)")
	fs.StringVar(&o.ClientCPUs, "client-cpus", o.ClientCPUs, "CPUs for the load generator and the backing Consul")
	fs.IntVar(&o.PeerXDSRate, "peer-xds-rate", o.PeerXDSRate, "Consul xds.update_max_per_second (0: Consul's default 250)")
	fs.BoolVar(&o.EnvoyNode, "envoy-node", false, "simulated proxies send an Envoy build's node (~24 KiB, its extension list) with every request, Envoy's default (set_node_on_first_message_only: false); default: a few fields, with the first delta request only")
	fs.BoolVar(&o.SharedDecode, "shared-decode", false, "simulated proxies share the decoding of identical resources (as Envoys on cores of their own; default: each decodes all it receives on the load generator's core)")
	fs.BoolVar(&o.H2, "h2-client", false, "simulated proxies speak HTTP/2 themselves, one goroutine each reading, decoding and ACKing inline as Envoy's event loop does (default: grpc-go's client, ~2× the load generator's CPU per response); one stream per connection")
	fs.IntVar(&o.StreamsPerConn, "streams-per-conn", 1, "simulated proxies sharing one gRPC connection (1: one each, as Envoy; 20,000 proxies need ≥ 2 here: 20,000 file descriptors per process)")
	bridgeXDS := fs.String("bridge-xds", "", "extra settings for every bridge's xds block, ';'-separated (e.g. \"max_initial_syncs = 500\")")
	fs.BoolVar(&o.NoListeners, "no-listeners", false, "bridge fleet proxies never ask for listeners (static listeners, cds_config over ADS only)")
	out := fs.String("out", "", "also write the Markdown table to this file")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the load generator itself to this file")
	fs.Parse(args)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	o.FleetSizes, o.GroupSizes, o.CompareSizes = ints(*sizes), ints(*gsizes), ints(*csizes)
	// A connection per proxy in this process and in the server: room for
	// the largest fleet twice over, and the rest of both processes; the
	// agent tier holds both ends of every proxy's socket here, and each
	// agent its listeners and upstream stream: three times over.
	largest := slices.Max(append(append(append([]int{0}, o.FleetSizes...), o.GroupSizes...), o.CompareSizes...))
	if limit, err := bench.RaiseFileLimit(uint64(3*largest + 8192)); err != nil {
		fmt.Fprintf(os.Stderr, "xds-load: open-file limit %d (raising it: %v); a fleet of over ~%d proxies needs -streams-per-conn 2 (grpc-go clients)\n", limit, err, limit/2-4096)
	}
	for _, line := range strings.Split(*bridgeXDS, ";") {
		if line = strings.TrimSpace(line); line != "" {
			o.BridgeXDS = append(o.BridgeXDS, line)
		}
	}
	o.CompareScenarios = nil
	for _, sc := range strings.Split(*compareScenarios, ",") {
		if sc = strings.TrimSpace(sc); sc != "" {
			o.CompareScenarios = append(o.CompareScenarios, sc)
		}
	}
	o.Compare = nil
	for _, c := range strings.Split(*compare, ",") {
		if c = strings.TrimSpace(c); c != "" {
			o.Compare = append(o.Compare, c)
		}
	}
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "xds-load-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		o.Dir = d
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	o.Self = self
	for _, p := range []*string{&o.ConsulBin, &o.BridgeBin, &o.BaseBridgeBin} {
		if *p == "" {
			continue
		}
		if abs, err := filepath.Abs(*p); err == nil {
			*p = abs
		}
	}
	o.Log = os.Stderr
	start := time.Now()
	host, _ := os.Hostname()
	fmt.Printf("# xds-load %s\n\n", map[bool]string{false: "quick", true: "full"}[full])
	fmt.Printf("machine: %s, %d CPUs (%s), %s; Go %s\n", host, runtime.NumCPU(), cpuModel(), memTotal(), runtime.Version())
	fmt.Printf("world: %d services × %d instances; %d routed services (= clusters per proxy in the comparison)\n", o.Services, o.Instances, o.Upstreams)
	fmt.Printf("core split: server under test on CPU %q, load generator + backing Consul on CPU %q; servers run as subprocesses (CPU and RSS from /proc)\n", o.ServerCPUs, o.ClientCPUs)
	fmt.Printf("command: xds-load run %s\n\n", strings.Join(args, " "))
	rows, err := bench.Run(ctx, o)
	bench.WriteTable(os.Stdout, rows)
	fmt.Printf("\ntotal time %s; logs in %s\n", time.Since(start).Round(time.Second), o.Dir)
	if *out != "" {
		f, ferr := os.Create(*out)
		if ferr == nil {
			bench.WriteTable(f, rows)
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "xds-load:", err)
		return 1
	}
	return 0
}

func agentsServerCmd(ctx context.Context, args []string) int {
	if err := bench.AgentsServer(ctx, args); err != nil {
		fmt.Fprintln(os.Stderr, "agents-server:", err)
		return 1
	}
	return 0
}

func baselineCmd(ctx context.Context, args []string) int {
	var cfg bench.BaselineConfig
	fs := flag.NewFlagSet("baseline-server", flag.ExitOnError)
	fs.StringVar(&cfg.ConsulAddr, "consul", "127.0.0.1:8500", "Consul HTTP address")
	fs.StringVar(&cfg.PolicyFile, "policy", "", "policy file (HCL)")
	fs.StringVar(&cfg.XDSListen, "xds", "127.0.0.1:18000", "xDS listen address")
	fs.StringVar(&cfg.HTTPListen, "http", "127.0.0.1:19100", "metrics/readyz listen address")
	fs.Parse(args)
	if err := bench.RunBaseline(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "baseline-server:", err)
		return 1
	}
	return 0
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if _, v, ok := strings.Cut(l, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "MemTotal:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				kb, _ := strconv.Atoi(f[1])
				return fmt.Sprintf("%.1f GiB RAM", float64(kb)/(1<<20))
			}
		}
	}
	return "unknown RAM"
}
