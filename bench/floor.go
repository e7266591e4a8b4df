package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// The floor: what a bare grpc-go server holds per connection when each
// connection carries one ADS stream at rest, as every proxy's does. Its
// handler answers the first request with an empty response and then only
// receives, so nothing of the bridge is in it but the transport settings
// (serve.TransportOptions). What it holds at N proxies, plus the bridge's
// own memory before any proxy connects, is the least the bridge could
// hold while it serves them through grpc-go (bench/README.md, "The
// floor of a connection per proxy").

// FloorConfig is one floor measurement.
type FloorConfig struct {
	Self     string // this binary; the server runs as `Self floor-server`
	N        int
	Parallel int
	Mode     Mode
	// Server is "bridge-options" (gRPC with the bridge's transport
	// options), "grpc-defaults", or "net-http" (gRPC's ServeHTTP on the
	// standard library's HTTP/2 server, unencrypted), or "raw" (the
	// bridge's options, nothing decoded: floor_raw.go).
	Server string
	Settle time.Duration // after the last stream's response, before reading
}

// FloorStats is the floor server's runtime memory, as it reports it.
type FloorStats struct {
	StackInuse   uint64 `json:"stack_inuse"`
	HeapAlloc    uint64 `json:"heap_alloc"`
	HeapInuse    uint64 `json:"heap_inuse"`
	HeapIdle     uint64 `json:"heap_idle"`
	HeapReleased uint64 `json:"heap_released"`
	Goroutines   int    `json:"goroutines"`
}

// FloorResult is the server's memory before any connection and with N.
type FloorResult struct {
	N                 int
	RSS0, RSS         int64
	Before, Connected FloorStats
	Dialled           time.Duration
}

// PerConn is the RSS each connection added.
func (r FloorResult) PerConn() float64 { return float64(r.RSS-r.RSS0) / float64(r.N) }

// RunFloor starts the floor server, connects N streams to it (one
// connection each, as the harness's HTTP/2 client and Envoy do), and
// reads its memory.
func RunFloor(ctx context.Context, cfg FloorConfig) (FloorResult, error) {
	cmd := exec.CommandContext(ctx, cfg.Self, "floor-server", "-server", cfg.Server)
	in, out, addr, err := startFloor(cmd)
	if err != nil {
		return FloorResult{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	report := func() (FloorStats, error) {
		var st FloorStats
		if _, err := io.WriteString(in, "report\n"); err != nil {
			return st, err
		}
		if !out.Scan() {
			return st, fmt.Errorf("floor server: no report (%v)", out.Err())
		}
		return st, json.Unmarshal(out.Bytes(), &st)
	}
	time.Sleep(cfg.Settle)
	res := FloorResult{N: cfg.N}
	res.RSS0, _ = ProcMem(cmd.Process.Pid)
	if res.Before, err = report(); err != nil {
		return res, err
	}
	start := time.Now()
	streams, err := floorConnect(ctx, addr, cfg)
	defer func() {
		for _, s := range streams {
			if s != nil {
				s.Close()
			}
		}
	}()
	if err != nil {
		return res, err
	}
	res.Dialled = time.Since(start)
	time.Sleep(cfg.Settle)
	res.RSS, _ = ProcMem(cmd.Process.Pid)
	res.Connected, err = report()
	return res, err
}

// startFloor starts cmd, a floor server, and reads the address it
// prints first; in and out are its input and the rest of its output.
func startFloor(cmd *exec.Cmd) (in io.WriteCloser, out *bufio.Scanner, addr string, err error) {
	cmd.Stderr = os.Stderr
	if in, err = cmd.StdinPipe(); err != nil {
		return nil, nil, "", err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, "", err
	}
	out = bufio.NewScanner(outPipe)
	if !out.Scan() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, nil, "", fmt.Errorf("floor server: no address (%v)", out.Err())
	}
	return in, out, out.Text(), nil
}

// floorConnect opens n streams, each on its own connection, sends each a
// first request and waits for its response; a goroutine per stream then
// keeps reading (answering the server's pings) until it closes.
func floorConnect(ctx context.Context, addr string, cfg FloorConfig) ([]*h2Stream, error) {
	streams := make([]*h2Stream, cfg.N)
	sem := make(chan struct{}, max(cfg.Parallel, 1))
	errs := make(chan error, cfg.N)
	var wg sync.WaitGroup
	for k := range cfg.N {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s, err := floorStream(ctx, addr, cfg.Mode, k)
			if err != nil {
				errs <- err
				return
			}
			streams[k] = s
		})
	}
	wg.Wait()
	close(errs)
	return streams, errors.Join(func() []error {
		var all []error
		for err := range errs {
			all = append(all, err)
		}
		return all
	}()...)
}

func floorStream(ctx context.Context, addr string, mode Mode, k int) (*h2Stream, error) {
	s, err := dialH2(ctx, addr, adsMethods[mode], func(int) {})
	if err != nil {
		return nil, err
	}
	node := &corev3.Node{Id: fmt.Sprintf("floor-%d", k), Cluster: "bench"}
	var req, resp any
	if mode == Delta {
		req = &discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}
		resp = &discoveryv3.DeltaDiscoveryResponse{}
	} else {
		req = &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}
		resp = &discoveryv3.DiscoveryResponse{}
	}
	if err := s.SendMsg(req); err == nil {
		err = s.RecvMsg(resp)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("floor stream %d: %w", k, err)
	}
	go func() {
		for s.RecvMsg(resp) == nil {
		}
	}()
	return s, nil
}

// ServeFloor is the floor server: it prints its address, then answers
// each "report" line on r with a JSON line of its memory on w.
func ServeFloor(ctx context.Context, server string, r io.Reader, w io.Writer) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var opts []grpc.ServerOption
	switch server {
	case "bridge-options":
		opts = serve.TransportOptions()
	case "raw":
		opts = append(serve.TransportOptions(), rawOptions()...)
	case "grpc-defaults", "net-http":
	default:
		return fmt.Errorf("unknown floor server %q", server)
	}
	g := grpc.NewServer(opts...)
	if server == "raw" {
		registerRaw(g)
	} else {
		discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, floorADS{})
	}
	defer g.Stop() // when r ends: the load generator is done
	go func() { <-ctx.Done(); g.Stop() }()
	if server == "net-http" {
		hs := &http.Server{Handler: g, Protocols: new(http.Protocols)}
		hs.Protocols.SetUnencryptedHTTP2(true)
		go func() { _ = hs.Serve(lis) }()
	} else {
		go func() { _ = g.Serve(lis) }()
	}
	fmt.Fprintln(w, lis.Addr().String())
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b, _ := json.Marshal(FloorStats{
			StackInuse: ms.StackInuse, HeapAlloc: ms.HeapAlloc, HeapInuse: ms.HeapInuse,
			HeapIdle: ms.HeapIdle, HeapReleased: ms.HeapReleased, Goroutines: runtime.NumGoroutine(),
		})
		fmt.Fprintln(w, string(b))
	}
	return sc.Err()
}

// floorADS answers a stream's first request with an empty response, then
// receives until the stream ends: a proxy's stream at rest.
type floorADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
}

func (floorADS) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return atRest(s.Recv, s.Send, func(typeURL string) *discoveryv3.DiscoveryResponse {
		return &discoveryv3.DiscoveryResponse{VersionInfo: "1", TypeUrl: typeURL, Nonce: "1"}
	})
}

func (floorADS) DeltaAggregatedResources(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return atRest(s.Recv, s.Send, func(typeURL string) *discoveryv3.DeltaDiscoveryResponse {
		return &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "1", TypeUrl: typeURL, Nonce: "1"}
	})
}

// atRest answers the first request with answer(its type) and then only
// receives until the stream ends.
func atRest[Req interface{ GetTypeUrl() string }, Resp any](recv func() (Req, error), send func(Resp) error, answer func(string) Resp) error {
	req, err := recv()
	if err != nil {
		return err
	}
	if err := send(answer(req.GetTypeUrl())); err != nil {
		return err
	}
	for {
		if _, err := recv(); err != nil {
			return err
		}
	}
}
