package agent

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/hashicorp/consul/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
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
	// updates applies what the stream delivers (apply), off its reader.
	updates handoff[adsclient.State]

	mu        sync.Mutex
	lingering *time.Timer                         // set while no local proxy uses the key
	idleSince time.Time                           // when lingering was set
	dropped   bool                                // dropIdle ran: late updates are ignored
	held      map[string]map[string]proto.Message // type URL -> name -> resource
	encoded   map[string]map[string]*anypb.Any    // type URL -> name -> the bytes it arrived in
	upstream  string                              // the replica streaming now, "" if none
	lastGood  string                              // "upstream" or "disk"
	// lastErr is why the last attempt failed ("" once a stream lasts);
	// syncErr is set when a stream reached a replica and still failed
	// (it cannot sync, which /readyz reports); refused when the central
	// bridge refused the key (local streams of it are refused too).
	lastErr, syncErr, refused string
}

func newRelay(a *Agent, k serve.RelayKey) *relay {
	r := &relay{a: a, key: k}
	r.updates = handoff[adsclient.State]{fn: r.apply, merge: newest}
	return r
}

// setError records why the relay is not in sync ("" clears it); reached
// says a replica was reached.
func (r *relay) setError(why string, reached bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr = why
	if why == "" {
		r.syncErr = ""
	} else if reached {
		r.syncErr = why
	}
}

// refuse marks the key refused by the central bridge: its local streams
// end with why and new ones are refused with it until a stream of the
// key delivers again. The agent stops serving it (the central decides
// who may have a group's config).
func (r *relay) refuse(why string) {
	r.mu.Lock()
	was := r.refused
	r.refused = why
	r.mu.Unlock()
	if was == "" {
		r.a.log.Error().Str("node_cluster", r.key.NodeCluster).Str("reason", why).Msg("the central bridge refuses this group to this agent; refusing its local proxies")
	}
	_, _ = r.a.server.SetRelay(r.key.Key, nil)
	r.a.gate.endKey(r.key.Key, status.Error(codes.PermissionDenied, "node.cluster "+strconv.Quote(r.key.NodeCluster)+": "+why))
}

// stableAfter is how long a stream must last to count as working: one
// that ends sooner (refused, a response over max_message_size, a replica
// that accepts and fails) is a failure, so the relay backs off instead of
// reconnecting at once, and reports that it cannot sync.
const stableAfter = 10 * time.Second

// relayedEnvoysCheck is how often a relay compares the Envoys it relays
// to with those it reported upstream.
const relayedEnvoysCheck = 2 * time.Second

func (r *relay) run(ctx context.Context) {
	b := newBackoff(r.a.cfg.BackoffInitial, r.a.cfg.BackoffMax)
	next := replicaStart(r.a.cfg.NodeID, r.key.Key)
	for ctx.Err() == nil {
		addrs, err := r.a.replicas(ctx)
		stable := false
		if err != nil || len(addrs) == 0 {
			if err == nil {
				err = errors.New("no central bridge replica is known (upstream addresses, or no passing instance of consul_service)")
			}
			r.setError(err.Error(), false)
			r.a.log.Warn().Err(err).Str("node_cluster", r.key.NodeCluster).Msg("no central bridge replica to connect to; serving the last good config")
		} else {
			stable = r.stream(ctx, addrs[next%len(addrs)])
			if !stable {
				next++ // the next attempt tries another replica
			}
		}
		if stable {
			b.reset()
		}
		select {
		case <-ctx.Done():
		case <-time.After(b.next()):
		}
	}
}

// replicaStart is where in the replica list a relay starts: a hash of
// the agent's node id and the relayed key, so a fleet's agents spread
// their streams evenly across replicas (each list is sorted), and an agent
// that restarts goes back to the replica it had. Starting every relay at
// the first address would put the whole fleet on one replica and leave
// the others idle until it fails.
func replicaStart(nodeID, key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(nodeID))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() & 0x7fffffff)
}

// backoff is jittered exponential: each wait is drawn from the upper
// half of the current step, which doubles up to max, so agents that lost
// the same replica do not come back in step.
type backoff struct {
	initial, max, cur time.Duration
}

func newBackoff(initial, max time.Duration) *backoff {
	if initial <= 0 {
		initial = 200 * time.Millisecond
	}
	max = cmp.Or(max, 5*time.Second)
	return &backoff{initial: initial, max: max, cur: initial}
}

func (b *backoff) reset() { b.cur = b.initial }

func (b *backoff) next() time.Duration {
	d := b.cur/2 + rand.N(b.cur/2+1)
	b.cur = min(2*b.cur, b.max)
	return d
}

// stream follows the key from one replica until the stream ends; it
// reports whether the stream lasted (stableAfter).
func (r *relay) stream(ctx context.Context, addr string) bool {
	tlsCfg, err := r.a.upstreamTLS(addr)
	if err != nil {
		r.setError("upstream TLS files: "+err.Error(), false)
		r.a.log.Error().Err(err).Msg("cannot load the upstream TLS files; fix them (the agent keeps serving the last good config)")
		return false
	}
	ua := "envoy"
	if r.key.Proxyless {
		ua = "grpc-relay" // the central bridge serves it API listeners
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nodeID, cluster, meta, ok := r.a.upstreamNode(r.key)
	if !ok {
		r.setError("no local registration of this Connect sidecar", false)
		r.a.log.Warn().Str("node_cluster", r.key.NodeCluster).Msg("no local registration of this Connect sidecar (any more); not relaying it")
		return false
	}
	// The Envoys this key is relayed to, for the central /v1/proxies: a
	// change reconnects (below), as node metadata is sent once a stream.
	reported := strings.Join(r.a.server.EnvoysOf(r.key.Key), ",")
	if reported != "" {
		meta = maps.Clone(meta)
		if meta == nil {
			meta = map[string]string{}
		}
		meta[xds.RelayedEnvoysMetadata] = reported
	}
	c, err := adsclient.Dial(dctx, adsclient.Config{
		Addr: addr, NodeID: nodeID, Cluster: cluster, Metadata: meta, UserAgent: ua, Mode: adsclient.Delta,
		InitialFetchTimeout: -1, // local proxies warm for themselves
		// The node once a stream: a change of it reconnects (above).
		NodeOnFirstMessageOnly: true,
		TLS:                    tlsCfg,
		MaxMessageSize:         r.a.cfg.MaxMessageSize,
		OnUpdate:               r.onUpdate,
	})
	if err != nil {
		r.setError(fmt.Sprintf("cannot reach central bridge replica %s: %v", addr, err), false)
		r.a.log.Warn().Err(err).Str("upstream", addr).Str("node_cluster", r.key.NodeCluster).Msg("cannot reach central bridge replica")
		return false
	}
	began := time.Now()
	r.setUpstream(addr)
	r.a.log.Info().Str("upstream", addr).Str("node_cluster", r.key.NodeCluster).Bool("proxyless", r.key.Proxyless).Msg("relaying from central bridge")
	stable, redial := false, false
	timer := time.NewTimer(stableAfter)
	defer timer.Stop()
	check := time.NewTicker(relayedEnvoysCheck)
	defer check.Stop()
wait:
	for {
		select {
		case <-c.Done():
			break wait
		case <-ctx.Done():
			break wait
		case <-timer.C:
			stable = true
			r.setError("", false) // it has synced and stays up
		case <-check.C:
			if strings.Join(r.a.server.EnvoysOf(r.key.Key), ",") != reported {
				redial = true
				break wait
			}
		}
	}
	err = c.Err()
	_ = c.Close()
	r.settle()
	if redial && ctx.Err() == nil {
		// Not a failure: the local proxies keep their config meanwhile.
		r.setUpstream("")
		r.a.log.Info().Str("upstream", addr).Str("node_cluster", r.key.NodeCluster).
			Msg("the Envoys relayed for this node.cluster changed; reconnecting to report them to the central bridge")
		return true
	}
	r.setUpstream("")
	if ctx.Err() != nil {
		return stable
	}
	r.a.metrics.reconnects.Inc()
	stable = stable || time.Since(began) >= stableAfter
	why, refused := r.a.upstreamFailure(err)
	if !stable || refused {
		r.setError(fmt.Sprintf("central bridge replica %s ended the stream after %s: %s", addr, time.Since(began).Round(time.Millisecond), why), true)
	}
	if refused {
		r.refuse(why)
	}
	r.a.log.Warn().Err(err).Str("upstream", addr).Str("node_cluster", r.key.NodeCluster).Bool("stable", stable).Str("advice", why).
		Msg("central bridge stream ended; local proxies keep their config while the agent reconnects")
	return stable && !refused
}

// upstreamFailure explains how a central stream ended: what to do, and
// whether the central bridge refused this key (the agent's certificate
// does not cover it), which retrying will not change.
func (a *Agent) upstreamFailure(err error) (string, bool) {
	switch status.Code(err) {
	case codes.ResourceExhausted:
		return fmt.Sprintf("%v; a response is larger than this agent accepts: raise upstream max_message_size (now %d bytes) to the central bridge's limit", err, a.cfg.MaxMessageSize), false
	case codes.PermissionDenied, codes.Unauthenticated:
		return fmt.Sprintf("the central bridge refuses to serve it to this agent (%v); the agent's certificate (upstream tls cert_file) must cover this group for the central's authorize_nodes, or remove it from allow_groups", err), true
	}
	if err == nil {
		return "the stream ended", false
	}
	return err.Error(), false
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

// onUpdate is the stream's OnUpdate. The update is applied on the
// handoff's goroutine and the reader returns at once, so the central gets
// its ACK before the local fan-out and save the update starts (Go runs
// the goroutine woken last first, and the client wakes its writer after
// OnUpdate), as from an Envoy, which ACKs once it has taken a response
// in; the reader is free for the next response.
func (r *relay) onUpdate(u adsclient.Update) { r.updates.offer(u.State) }

// newest is the relay's handoff merge: each state a stream delivers is
// its whole state (types only come, never go, within a stream), and a
// stream's updates are all applied before the next stream starts
// (settle), so the newest pending state holds all of the older ones.
func newest(_, newer adsclient.State) adsclient.State { return newer }

// settle waits until every update the ended stream delivered has been
// applied. The relay acts on the end (a refusal, the next stream) only
// after that, so no late update serves a key the central bridge just
// refused, and no earlier stream's state is applied over a later one's.
func (r *relay) settle() { r.updates.flush() }

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
	if r.encoded == nil {
		r.encoded = map[string]map[string]*anypb.Any{}
	}
	for typ, ts := range st.Types {
		r.held[typ] = withoutRelayedLeaves(typ, ts.Resources)
		r.encoded[typ] = withoutRelayedLeaves(typ, ts.Encoded) // nor their bytes
	}
	r.lastGood, r.refused = "upstream", ""
	res := resources(r.held, r.encoded)
	r.mu.Unlock()
	if err := r.serve(res); err != nil {
		r.a.log.Error().Err(err).Str("node_cluster", r.key.NodeCluster).Msg("cannot serve what the central bridge sent; local proxies keep their config")
		return
	}
	r.a.persist(r.key.Key, res) // relayed resources only: local keys stay in memory
}

// withoutRelayedLeaves drops leaf-named secrets the central bridge sent:
// leaves are the agent's alone (serve), and one never served must not be
// held or written to data_dir either (persist), as it would be with the
// rest of what the key holds.
func withoutRelayedLeaves[V any](typ string, held map[string]V) map[string]V {
	if typ != resourcev3.SecretType {
		return held
	}
	var out map[string]V
	for name := range held {
		if strings.HasPrefix(name, LeafSecretPrefix) {
			if out == nil {
				out = maps.Clone(held)
			}
			delete(out, name)
		}
	}
	if out == nil {
		return held
	}
	return out
}

// serve serves the key the relayed resources plus the local Connect
// secrets (which win over a relayed secret of the same name).
func (r *relay) serve(relayed *xds.Resources) error {
	res := *relayed
	// Leaves are the agent's alone (local, per acting service): one
	// relayed under a leaf's name is dropped, so no key ever gets a leaf
	// it does not act for, whatever the central bridge sends.
	local := r.a.connect.secrets(r.a.leafServices(r.key.Key))
	names := map[string]bool{}
	for _, s := range local {
		names[s.GetName()] = true
	}
	res.Secrets = slices.DeleteFunc(slices.Clone(relayed.Secrets), func(s *tlsv3.Secret) bool {
		return names[s.GetName()] || strings.HasPrefix(s.GetName(), LeafSecretPrefix)
	})
	res.Secrets = append(res.Secrets, local...)
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
	res := resources(r.held, r.encoded)
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
	// The file's bytes are not reused: a set's encoding is compared by
	// bytes with the central's (deterministic) one when it sends the same
	// content, and a file from an older agent may not be deterministic.
	r.mu.Lock()
	r.held, r.encoded, r.lastGood = held, map[string]map[string]*anypb.Any{}, "disk"
	res := resources(held, nil)
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
	r.idleSince = time.Now()
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
func (r *relay) status() keyStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return keyStatus{NodeCluster: r.key.NodeCluster, Proxyless: r.key.Proxyless, Upstream: r.upstream, Serving: r.lastGood,
		Error: r.lastErr, SyncError: r.syncErr, Refused: r.refused}
}

// resources turns held state into the server's resource lists.
func resources(held map[string]map[string]proto.Message, encoded map[string]map[string]*anypb.Any) *xds.Resources {
	res := &xds.Resources{Encoded: map[proto.Message]*anypb.Any{}}
	for _, typ := range slices.Sorted(maps.Keys(held)) {
		for _, name := range slices.Sorted(maps.Keys(held[typ])) {
			if a := encoded[typ][name]; a != nil {
				res.Encoded[held[typ][name]] = a
			}
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
	c, err := a.consul.get()
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
	pem, err := policy.ReadBoundedFile(context.Background(), t.CAFile, policy.MaxPEMFileBytes)
	if err != nil {
		return nil, fmt.Errorf("upstream tls ca_file: %w", err)
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
