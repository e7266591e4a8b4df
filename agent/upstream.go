package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// relay follows what the central bridge serves one key, over one delta
// ADS stream that subscribes the way Envoy does (every cluster and
// listener, the endpoints, routes and secrets they name), and hands it to
// the local server. When the stream ends it moves to the next replica;
// the local streams never notice: the key keeps being served what it
// held, and types the new stream has not answered yet keep their old
// resources, so a reconnect never serves a partial world. Versions are
// content hashes on both sides, so resources that did not change are not
// resent to local proxies.
type relay struct {
	a   *Agent
	key serve.RelayKey

	cancel context.CancelFunc // ends run (the relay was dropped)

	mu        sync.Mutex
	lingering *time.Timer                         // set while no local proxy uses the key
	dropped   bool                                // dropIdle ran: late updates are ignored
	held      map[string]map[string]proto.Message // type URL -> name -> resource
	upstream  string                              // the replica streaming now, "" if none
	lastGood  string                              // "upstream" or "disk"
}

func (r *relay) run(ctx context.Context) {
	backoff := r.a.cfg.BackoffInitial
	next := 0
	for ctx.Err() == nil {
		addrs, err := r.a.replicas(ctx)
		if err != nil || len(addrs) == 0 {
			r.a.log.Warn().Err(err).Str("node_cluster", r.key.NodeCluster).Msg("no central bridge replica to connect to; serving the last good config")
		}
		for i := 0; i < len(addrs) && ctx.Err() == nil; i++ {
			addr := addrs[(next+i)%len(addrs)]
			if r.stream(ctx, addr) {
				backoff = r.a.cfg.BackoffInitial // it worked for a while
				next = (next + i + 1) % len(addrs)
				i = -1 // a fresh round, from the replica after this one
				addrs, _ = r.a.replicas(ctx)
				if len(addrs) == 0 {
					break
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, r.a.cfg.BackoffMax)
	}
}

// stream follows the key from one replica until the stream ends; it
// reports whether the stream delivered anything.
func (r *relay) stream(ctx context.Context, addr string) bool {
	tlsCfg, err := r.a.upstreamTLS(addr)
	if err != nil {
		r.a.log.Error().Err(err).Msg("cannot load the upstream TLS files; fix them (the agent keeps serving the last good config)")
		return false
	}
	ua := "envoy"
	if r.key.Proxyless {
		ua = "grpc-relay" // the central bridge serves it API listeners
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var got bool
	nodeID, cluster, meta, ok := r.a.upstreamNode(r.key)
	if !ok {
		r.a.log.Warn().Str("node_cluster", r.key.NodeCluster).Msg("no local registration of this Connect sidecar (any more); not relaying it")
		return false
	}
	c, err := adsclient.Dial(dctx, adsclient.Config{
		Addr: addr, NodeID: nodeID, Cluster: cluster, Metadata: meta, UserAgent: ua, Mode: adsclient.Delta,
		InitialFetchTimeout: -1, // local proxies warm for themselves
		TLS:                 tlsCfg,
		OnUpdate: func(u adsclient.Update) {
			got = true
			r.apply(u.State)
		},
	})
	if err != nil {
		r.a.log.Warn().Err(err).Str("upstream", addr).Str("node_cluster", r.key.NodeCluster).Msg("cannot reach central bridge replica")
		return false
	}
	r.setUpstream(addr)
	r.a.log.Info().Str("upstream", addr).Str("node_cluster", r.key.NodeCluster).Bool("proxyless", r.key.Proxyless).Msg("relaying from central bridge")
	select {
	case <-c.Done():
	case <-ctx.Done():
	}
	err = c.Err()
	_ = c.Close()
	r.setUpstream("")
	if ctx.Err() == nil {
		r.a.metrics.reconnects.Inc()
		r.a.log.Warn().Err(err).Str("upstream", addr).Str("node_cluster", r.key.NodeCluster).
			Msg("central bridge stream ended; local proxies keep their config while the agent moves to another replica")
	}
	return got
}

func (r *relay) setUpstream(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if addr != "" && r.upstream == "" {
		r.a.metrics.connected.Inc()
	} else if addr == "" && r.upstream != "" {
		r.a.metrics.connected.Dec()
	}
	r.upstream = addr
}

// apply merges the stream's state into what the key holds and serves it.
func (r *relay) apply(st adsclient.State) {
	r.mu.Lock()
	if r.dropped {
		r.mu.Unlock()
		return
	}
	if r.held == nil {
		r.held = map[string]map[string]proto.Message{}
	}
	for typ, ts := range st.Types {
		r.held[typ] = ts.Resources
	}
	r.lastGood = "upstream"
	res := resources(r.held)
	r.mu.Unlock()
	if err := r.serve(res); err != nil {
		r.a.log.Error().Err(err).Str("node_cluster", r.key.NodeCluster).Msg("cannot serve what the central bridge sent; local proxies keep their config")
		return
	}
	r.a.persist(r.key.Key, res) // relayed resources only: local keys stay in memory
}

// serve serves the key the relayed resources plus the local Connect
// secrets (which win over a relayed secret of the same name).
func (r *relay) serve(relayed *xds.Resources) error {
	res := *relayed
	if local := r.a.connect.secrets(); len(local) > 0 {
		names := map[string]bool{}
		for _, s := range local {
			names[s.GetName()] = true
		}
		res.Secrets = slices.DeleteFunc(slices.Clone(relayed.Secrets), func(s *tlsv3.Secret) bool { return names[s.GetName()] })
		res.Secrets = append(res.Secrets, local...)
	}
	_, err := r.a.server.SetRelay(r.key.Key, &res)
	return err
}

// reserve serves the key again (the local secrets changed).
func (r *relay) reserve() {
	r.mu.Lock()
	if r.held == nil {
		r.mu.Unlock()
		return
	}
	res := resources(r.held)
	r.mu.Unlock()
	if err := r.serve(res); err != nil {
		r.a.log.Error().Err(err).Str("node_cluster", r.key.NodeCluster).Msg("cannot serve the new local certificates")
	}
}

// restore serves key what the data directory held for it.
func (r *relay) restore(anys []*anypb.Any) error {
	held := map[string]map[string]proto.Message{}
	for _, a := range anys {
		m, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("decoding %s: %w", a.GetTypeUrl(), err)
		}
		if held[a.GetTypeUrl()] == nil {
			held[a.GetTypeUrl()] = map[string]proto.Message{}
		}
		held[a.GetTypeUrl()][xds.ResourceName(m)] = m
	}
	r.mu.Lock()
	r.held, r.lastGood = held, "disk"
	res := resources(held)
	r.mu.Unlock()
	return r.serve(res)
}

// linger schedules the relay's drop after d unless a proxy comes back.
func (r *relay) linger(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lingering != nil {
		r.lingering.Stop()
	}
	r.lingering = time.AfterFunc(d, func() { r.a.dropIdle(r) })
}

func (r *relay) stopLinger() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lingering != nil {
		r.lingering.Stop()
		r.lingering = nil
	}
}

func (r *relay) idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lingering != nil
}

// status is the key's line on /readyz.
func (r *relay) status() (upstream, source string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.upstream, r.lastGood
}

// resources turns held state into the server's resource lists.
func resources(held map[string]map[string]proto.Message) *xds.Resources {
	res := &xds.Resources{}
	for _, typ := range slices.Sorted(maps.Keys(held)) {
		for _, name := range slices.Sorted(maps.Keys(held[typ])) {
			switch m := held[typ][name].(type) {
			case *clusterv3.Cluster:
				res.Clusters = append(res.Clusters, m)
			case *endpointv3.ClusterLoadAssignment:
				res.Endpoints = append(res.Endpoints, m)
			case *listenerv3.Listener:
				res.Listeners = append(res.Listeners, m)
			case *routev3.RouteConfiguration:
				res.Routes = append(res.Routes, m)
			case *tlsv3.Secret:
				res.Secrets = append(res.Secrets, m)
			}
		}
	}
	return res
}

// replicas lists the central bridge's addresses: the static list, or the
// passing instances of its Consul service (asked of the local agent).
func (a *Agent) replicas(ctx context.Context) ([]string, error) {
	if a.cfg.ConsulService == "" {
		return a.cfg.Upstreams, nil
	}
	c, err := api.NewClient(&api.Config{Address: a.cfg.ConsulAddress, Token: os.Getenv("CONSUL_HTTP_TOKEN")})
	if err != nil {
		return nil, err
	}
	entries, _, err := c.Health().Service(a.cfg.ConsulService, "", true, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("finding central bridge replicas (Consul service %q): %w", a.cfg.ConsulService, err)
	}
	var out []string
	for _, e := range entries {
		host := e.Service.Address
		if host == "" {
			host = e.Node.Address
		}
		out = append(out, net.JoinHostPort(host, strconv.Itoa(e.Service.Port)))
	}
	slices.Sort(out)
	return out, nil
}

// upstreamTLS builds the TLS configuration for one replica, reading the
// files each time so rotated certificates are picked up on reconnect.
func (a *Agent) upstreamTLS(addr string) (*tls.Config, error) {
	t := a.cfg.TLS
	if t.CAFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", t.CAFile)
	}
	name := t.ServerName
	if name == "" {
		name, _, _ = net.SplitHostPort(addr)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
