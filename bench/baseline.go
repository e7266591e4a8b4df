package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// BaselineConfig configures the baseline server.
type BaselineConfig struct {
	ConsulAddr string
	PolicyFile string
	XDSListen  string
	HTTPListen string
	Group      string // proxy group whose listeners every node gets
}

// singleKey puts every node under one snapshot.
type singleKey struct{}

func (singleKey) ID(*corev3.Node) string { return "all" }

// RunBaseline is the simplest go-control-plane set-up fed by the same
// Consul watch as the bridge: one SotW snapshot cache with ads=true, one
// snapshot for every node, and on every Consul update the whole world is
// rebuilt (same model.Build and xds.Translate as the bridge, so resources are
// identical) and set as a new snapshot with a counter version — no
// debounce, no per-type content versions, no per-group keys.
func RunBaseline(ctx context.Context, cfg BaselineConfig) error {
	if cfg.Group == "" {
		cfg.Group = "bench"
	}
	pcfg, _, diags := policy.LoadFiles(cfg.PolicyFile)
	if diags.HasErrors() {
		return fmt.Errorf("policy: %s", diags.Error())
	}
	pol := pcfg.Policy
	// Consul is read exactly as the bridge reads it with default settings,
	// so the rows differ only in the serving layer.
	client, err := consul.NewClient(consul.ClientConfig{Address: cfg.ConsulAddr, MaxConns: policy.DefaultMaxQueries + 4})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reqs := prometheus.NewCounter(prometheus.CounterOpts{Name: "baseline_consul_requests_total", Help: "Consul HTTP requests made."})
	snaps := prometheus.NewCounter(prometheus.CounterOpts{Name: "baseline_snapshots_total", Help: "Snapshots set."})
	reg.MustRegister(reqs, snaps, collectors.NewGoCollector())
	var ready atomic.Bool

	watcher := consul.NewWatcher(consul.Config{
		Client:     client,
		Query:      consul.QueryOptions{Stale: true, WaitTime: policy.DefaultWaitTime, UseCache: true},
		MaxQueries: policy.DefaultMaxQueries,
		Targets:    model.WatchTargets(pol),
		Logger:     zerolog.Nop(),
		OnQuery:    func(string, string, error, time.Duration) { reqs.Inc() },
	})
	cache := cachev3.NewSnapshotCache(true, singleKey{}, nil)
	srv := serverv3.NewServer(ctx, cache, nil)
	g := grpc.NewServer(grpc.MaxConcurrentStreams(1000))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, srv)
	lis, err := net.Listen("tcp", cfg.XDSListen)
	if err != nil {
		return err
	}
	hlis, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	hs := &http.Server{Handler: mux}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)
	go func() { errc <- g.Serve(lis) }()
	go func() { errc <- hs.Serve(hlis) }()
	go func() { errc <- watcher.Run(ctx) }()

	version := 0
	for {
		select {
		case <-ctx.Done():
			g.Stop()
			hs.Close()
			return nil
		case err := <-errc:
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
		case u := <-watcher.Updates():
			if !u.Complete && !ready.Load() {
				continue
			}
			w, err := pipeline.Compute(pipeline.Input{Catalog: u.Catalog, Policy: pol}, nil)
			if err != nil {
				return err
			}
			out := w.Output
			group := out.Groups[cfg.Group]
			if group == nil {
				group = &xds.Resources{}
			}
			shared, grp := out.Shared.ByType(), group.ByType()
			version++
			snap, err := cachev3.NewSnapshot(strconv.Itoa(version), map[resourcev3.Type][]types.Resource{
				resourcev3.ClusterType:  shared[resourcev3.ClusterType],
				resourcev3.EndpointType: shared[resourcev3.EndpointType],
				resourcev3.ListenerType: grp[resourcev3.ListenerType],
				resourcev3.RouteType:    grp[resourcev3.RouteType],
			})
			if err != nil {
				return err
			}
			if err := cache.SetSnapshot(ctx, "all", snap); err != nil {
				return err
			}
			snaps.Inc()
			ready.Store(true)
		}
	}
}
