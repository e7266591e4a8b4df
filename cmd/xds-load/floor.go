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
