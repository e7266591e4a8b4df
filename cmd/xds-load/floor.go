package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/bench"
)

// floorCmd measures the floor of a connection per proxy: a bare grpc-go
// server (bench/floor.go) at each N, with the bridge's transport options
// and with gRPC's defaults, in turn.
func floorCmd(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("floor", flag.ExitOnError)
	sizes := fs.String("n", "1000,10000", "numbers of connections, each with one ADS stream")
	parallel := fs.Int("parallel", 64, "connections dialled at once")
	mode := fs.String("mode", "delta", "delta or sotw")
	runs := fs.Int("runs", 2, "runs of each setting, interleaved")
	servers := fs.String("servers", "bridge-options,grpc-defaults", "floor servers, in turn: bridge-options, grpc-defaults, net-http, raw")
	settle := fs.Duration("settle", time.Second, "wait before each reading (the harness's S3 settle)")
	fs.Parse(args)
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		return 1
	}
	ns := ints(*sizes)
	if len(ns) == 0 {
		fmt.Fprintln(os.Stderr, "floor: -n names no size")
		return 2
	}
	if _, err := bench.RaiseFileLimit(uint64(2*maxOf(ns) + 4096)); err != nil {
		fmt.Fprintln(os.Stderr, "floor: raising the open-file limit:", err)
	}
	m := bench.SotW
	if *mode == "delta" {
		m = bench.Delta
	}
	fmt.Printf("| N | server | RSS before | RSS connected | per connection | stacks per connection | heap in use per connection | free spans held | goroutines per connection |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, n := range ns {
		for range *runs {
			for _, server := range strings.Split(*servers, ",") {
				r, err := bench.RunFloor(ctx, bench.FloorConfig{Self: self, N: n, Parallel: *parallel, Mode: m, Server: server, Settle: *settle})
				if err != nil {
					fmt.Fprintln(os.Stderr, "floor:", err)
					return 1
				}
				name := floorNames[server]
				per := func(a, b uint64) string { return kib((float64(b) - float64(a)) / float64(n)) }
				fmt.Printf("| %d | %s | %s | %s | %s | %s | %s | %s | %.2f |\n", n, name,
					mib(float64(r.RSS0)), mib(float64(r.RSS)), kib(r.PerConn()),
					per(r.Before.StackInuse, r.Connected.StackInuse), per(r.Before.HeapInuse, r.Connected.HeapInuse),
					mib(float64(r.Connected.HeapIdle-r.Connected.HeapReleased)),
					float64(r.Connected.Goroutines-r.Before.Goroutines)/float64(n))
			}
		}
	}
	return 0
}

// floorACKsCmd measures what the floor server spends per small message
// when N streams' messages come as one burst a period or spread over it
// (bench/floor_acks.go).
func floorACKsCmd(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("floor-acks", flag.ExitOnError)
	n := fs.Int("n", 1980, "streams, each on its own connection")
	parallel := fs.Int("parallel", 64, "connections dialled at once")
	period := fs.Duration("period", 1600*time.Millisecond, "one message per stream each period")
	rounds := fs.Int("rounds", 20, "periods")
	runs := fs.Int("runs", 2, "runs of each setting, interleaved")
	servers := fs.String("servers", "raw,bridge-options", "floor servers, in turn (as floor's -servers)")
	serverCPUs := fs.String("server-cpus", "0", "CPUs for the floor server (taskset list; GOMAXPROCS their count; empty: no pinning)")
	clientCPUs := fs.String("client-cpus", "1", "CPUs for this process (empty: no pinning)")
	fs.Parse(args)
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor-acks:", err)
		return 1
	}
	if _, err := bench.RaiseFileLimit(uint64(2**n + 4096)); err != nil {
		fmt.Fprintln(os.Stderr, "floor-acks: raising the open-file limit:", err)
	}
	fmt.Printf("| N | server | messages | server CPU | per message |\n|---|---|---|---|---|\n")
	for range *runs {
		for _, server := range strings.Split(*servers, ",") {
			for _, spread := range []bool{false, true} {
				r, err := bench.RunFloorACKs(ctx, bench.FloorACKsConfig{Self: self, N: *n, Parallel: *parallel, Mode: bench.Delta, Server: server,
					Period: *period, Rounds: *rounds, Spread: spread, ServerCPUs: *serverCPUs, ClientCPUs: *clientCPUs})
				if err != nil {
					fmt.Fprintln(os.Stderr, "floor-acks:", err)
					return 1
				}
				how := "at once each period"
				if spread {
					how = fmt.Sprintf("spread over each period (one every %v)", (*period / time.Duration(*n)).Round(time.Microsecond))
				}
				fmt.Printf("| %d | %s | %d, %s | %v | %.1f µs |\n", *n, floorNames[server], r.Messages, how,
					r.CPU.Round(time.Millisecond), float64(r.PerMessage())/float64(time.Microsecond))
			}
		}
	}
	return 0
}

var floorNames = map[string]string{
	"bridge-options": "grpc-go, the bridge's transport options",
	"grpc-defaults":  "grpc-go, its defaults",
	"net-http":       "grpc-go's ServeHTTP on net/http's HTTP/2",
	"raw":            "grpc-go, the bridge's options, a codec and handler that decode nothing",
}

func floorServerCmd(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("floor-server", flag.ExitOnError)
	server := fs.String("server", "bridge-options", "bridge-options, grpc-defaults or net-http")
	fs.Parse(args)
	if err := bench.ServeFloor(ctx, *server, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "floor-server:", err)
		return 1
	}
	return 0
}

func maxOf(v []int) int {
	m := 0
	for _, n := range v {
		m = max(m, n)
	}
	return m
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
func kib(b float64) string { return fmt.Sprintf("%.1f KiB", b/(1<<10)) }
