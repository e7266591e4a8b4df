package consul

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// MeshConfig configures a MeshWatcher.
type MeshConfig struct {
	Client *api.Client
	Query  QueryOptions
	// Central also follows every sidecar service's leaf certificate
	// through the agent (blocking), with the client's token.
	Central bool
	// Budget, if set, is the catalog watcher whose query slots the mesh's
	// blocking queries share (Config.MaxQueries), so the two together
	// stay within the client's connections. A proxy's health change is
	// then seen when its query's turn comes (no hints hurry it).
	Budget *Watcher
	// Targets are services whose connect health is followed besides the
	// registrations' upstreams (the policy's mesh_routes targets, which
	// no sidecar may dial directly); [MeshWatcher.SetTargets] changes
	// them at run time.
	Targets []ServiceKey
	Logger  zerolog.Logger
	OnQuery func(endpoint, datacenter string, err error, d time.Duration)
}

// MeshUpdate is one mesh snapshot; the first comes once the proxy list,
// every proxy service, the roots, the agent's ACL default and (central)
// every leaf have been read.
type MeshUpdate struct {
	Mesh      *Mesh
	ChangedAt time.Time
}

// MeshWatcher follows Consul Connect with one blocking query per
// question: the connect-proxy service list, each proxy service's health,
// the CA roots, and in central mode each sidecar service's leaf.
type MeshWatcher struct {
	cfg     MeshConfig
	updates chan MeshUpdate
	// retarget wakes Run after SetTargets; targets is guarded by mu.
	retarget chan struct{}
	mu       sync.Mutex
	targets  []ServiceKey
	leaves   []string // SetLeafServices (gateways.go)
}

// NewMeshWatcher returns a watcher; Run starts it.
func NewMeshWatcher(cfg MeshConfig) *MeshWatcher {
	return &MeshWatcher{cfg: cfg, updates: make(chan MeshUpdate, 1), retarget: make(chan struct{}, 1), targets: slices.Clone(cfg.Targets)}
}

// SetTargets replaces the services followed besides the registrations'
// upstreams (MeshConfig.Targets). It is safe from any goroutine and never
// blocks; the watcher starts and stops their queries and publishes.
func (w *MeshWatcher) SetTargets(keys []ServiceKey) {
	w.mu.Lock()
	w.targets = slices.Clone(keys)
	w.mu.Unlock()
	signal(w.retarget)
}

func (w *MeshWatcher) currentTargets() []ServiceKey {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.targets)
}

// Updates delivers the newest mesh; an unread one is replaced.
func (w *MeshWatcher) Updates() <-chan MeshUpdate { return w.updates }

// proxyFilter selects connect-proxy and gateway services from the
// catalog list.
const proxyFilter = `ServiceKind == "connect-proxy" or ServiceKind == "terminating-gateway" or ServiceKind == "mesh-gateway"`

// nativeFilter selects Connect-native registrations in the same list.
const nativeFilter = "ServiceConnect.Native == true"

type meshEvent struct {
	kind    string // "list", "proxies", "connect", "roots", "leaf", "default"
	key     string // proxy service name or leaf service
	gen     uint64
	names   []string
	proxies []Proxy
	roots   *api.CARootList
	leaf    *Leaf
	def     ir.IntentionAction
	at      time.Time
}

type meshWatch struct {
	gen    uint64
	cancel context.CancelFunc
	read   bool
	// remote marks a query on another datacenter, which never holds
	// back the first publication (that datacenter may never answer).
	remote bool
}

// Run follows the mesh until ctx ends. Errors back off and keep the last
// good data, as every view does.
func (w *MeshWatcher) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	events := make(chan meshEvent)
	send := func(ctx context.Context, ev meshEvent) {
		select {
		case events <- ev:
		case <-ctx.Done():
		}
	}
	result := func(endpoint string) func(error, time.Duration) { return w.queryResult(endpoint, "") }
	log := w.cfg.Logger
	join := func(id string) *member {
		if w.cfg.Budget == nil {
			return nil
		}
		return w.cfg.Budget.slots.join(id, false)
	}
	// The names of the services a catalog filter selects, followed as
	// one view each: connect-proxy registrations and Connect-native ones.
	serviceList := func(id, filter, kind string) {
		v := view[[]string]{
			id: id,
			fetch: func(q *api.QueryOptions) ([]string, *api.QueryMeta, error) {
				q.Filter = filter
				m, meta, err := w.cfg.Client.Catalog().Services(q)
				return slices.Sorted(maps.Keys(m)), meta, err
			},
			equal: slices.Equal[[]string], opts: w.cfg.Query, log: log, result: result("catalog_services"),
		}
		wg.Go(func() {
			v.run(ctx, func(names []string, _ uint64, at time.Time) { send(ctx, meshEvent{kind: kind, names: names, at: at}) })
		})
	}
	serviceList("catalog_services(connect-proxy)", proxyFilter, "list")
	serviceList("catalog_services(connect-native)", nativeFilter, "natives")
	roots := view[*api.CARootList]{
		id: "connect_ca_roots",
		fetch: func(q *api.QueryOptions) (*api.CARootList, *api.QueryMeta, error) {
			return w.cfg.Client.Connect().CARoots(q)
		},
		equal: equalRoots, opts: w.cfg.Query, log: log, result: result("connect_ca_roots"),
	}
	roots.slots = join(roots.id)
	defer roots.slots.leave()
	wg.Go(func() {
		roots.run(ctx, func(r *api.CARootList, _ uint64, at time.Time) { send(ctx, meshEvent{kind: "roots", roots: r, at: at}) })
	})
	wg.Go(func() {
		def := w.defaultIntention(ctx)
		send(ctx, meshEvent{kind: "default", def: def, at: time.Now()})
	})

	var (
		gen       uint64
		proxyW    = map[string]*meshWatch{}
		leafW     = map[string]*meshWatch{}
		connectW  = map[string]*meshWatch{}
		endpoints = map[string][]Proxy{}
		proxies   = map[string][]Proxy{}
		leaves    = map[string]Leaf{}
		listRead  bool
		// nativeList is nil until the Connect-native list is read: a
		// gRPC server must get its listener in the first snapshot.
		nativeList []string
		rootList   *api.CARootList
		def        ir.IntentionAction
		published  bool
		remoteGWs  = newRemoteGatewayViews()
	)
	start := func(set map[string]*meshWatch, key string, run func(ctx context.Context, gen uint64)) {
		gen++
		wctx, wcancel := context.WithCancel(ctx)
		set[key] = &meshWatch{gen: gen, cancel: wcancel}
		g := gen
		wg.Go(func() { run(wctx, g) })
	}
	runProxies := func(name string) func(context.Context, uint64) {
		return func(ctx context.Context, g uint64) {
			v := view[[]Proxy]{
				id: "health(" + name + ")",
				fetch: func(q *api.QueryOptions) ([]Proxy, *api.QueryMeta, error) {
					entries, meta, err := w.cfg.Client.Health().Service(name, "", false, q)
					return NewProxies(entries), meta, err
				},
				equal: equalProxies, opts: w.cfg.Query, log: log, result: result("health_service"),
			}
			v.slots = join(v.id)
			defer v.slots.leave()
			v.run(ctx, func(p []Proxy, _ uint64, at time.Time) {
				send(ctx, meshEvent{kind: "proxies", key: name, gen: g, proxies: p, at: at})
			})
		}
	}
	runConnect := func(k ServiceKey) func(context.Context, uint64) {
		return func(ctx context.Context, g uint64) {
			opts := w.cfg.Query
			if k.Datacenter != "" {
				opts.Datacenter = k.Datacenter
			}
			v := view[[]Proxy]{
				id: "health_connect(" + k.String() + ")",
				fetch: func(q *api.QueryOptions) ([]Proxy, *api.QueryMeta, error) {
					entries, meta, err := w.cfg.Client.Health().Connect(k.Name, "", false, q)
					return newConnectEndpoints(entries), meta, err
				},
				equal: equalProxies, opts: opts, log: log, result: w.queryResult("health_connect", w.remoteDatacenter(k.Datacenter)),
			}
			v.slots = join(v.id)
			defer v.slots.leave()
			v.run(ctx, func(p []Proxy, _ uint64, at time.Time) {
				send(ctx, meshEvent{kind: "connect", key: k.String(), gen: g, proxies: p, at: at})
			})
		}
	}
	runLeaf := func(service string) func(context.Context, uint64) {
		return func(ctx context.Context, g uint64) {
			v := view[*Leaf]{
				id: "connect_ca_leaf(" + service + ")",
				fetch: func(q *api.QueryOptions) (*Leaf, *api.QueryMeta, error) {
					// The agent signs for its own datacenter only.
					q.Datacenter = ""
					l, meta, err := w.cfg.Client.Agent().ConnectCALeaf(service, q)
					if err != nil {
						return nil, meta, err
					}
					if l == nil {
						return nil, meta, fmt.Errorf("the agent returned no leaf for %q", service)
					}
					return &Leaf{CertPEM: l.CertPEM, KeyPEM: ir.Redacted(l.PrivateKeyPEM), ServiceURI: l.ServiceURI, ValidBefore: l.ValidBefore}, meta, nil
				},
				equal: func(a, b *Leaf) bool {
					return a != nil && b != nil && a.CertPEM == b.CertPEM && string(a.KeyPEM) == string(b.KeyPEM)
				},
				opts: w.cfg.Query, log: log, result: result("connect_ca_leaf"),
			}
			v.slots = join(v.id)
			defer v.slots.leave()
			v.run(ctx, func(l *Leaf, _ uint64, at time.Time) {
				send(ctx, meshEvent{kind: "leaf", key: service, gen: g, leaf: l, at: at})
			})
		}
	}
	// reconcile starts and stops the per-proxy-service and per-leaf views.
	reconcile := func(names []string) {
		want := map[string]bool{}
		for _, n := range names {
			want[n] = true
		}
		for n, mw := range proxyW {
			if !want[n] {
				mw.cancel()
				delete(proxyW, n)
				delete(proxies, n)
			}
		}
		for _, n := range names {
			if proxyW[n] == nil {
				start(proxyW, n, runProxies(n))
			}
		}
		upstreams := map[string]ServiceKey{}
		for _, k := range w.currentTargets() {
			upstreams[k.String()] = k
		}
		services := map[string]bool{}
		var all []Proxy
		for _, ps := range proxies {
			all = append(all, ps...)
			for _, p := range ps {
				if p.Kind == "" {
					services[p.Service] = true
				}
				for _, k := range p.upstreamKeys() {
					upstreams[k.String()] = k
				}
			}
		}
		// A transparent proxy's implicit upstreams (tproxy.go).
		for _, k := range (&Mesh{Proxies: all, Natives: nativeList}).TransparentTargets() {
			upstreams[k.String()] = k
		}
		for s, mw := range connectW {
			if _, ok := upstreams[s]; !ok {
				mw.cancel()
				delete(connectW, s)
				delete(endpoints, s)
			}
		}
		for _, s := range slices.Sorted(maps.Keys(upstreams)) {
			if connectW[s] == nil {
				k := upstreams[s]
				start(connectW, s, runConnect(k))
				connectW[s].remote = k.Datacenter != ""
			}
		}
		gatewayDCs := (&Mesh{}).gatewayDatacenters(slices.Collect(maps.Values(upstreams))...)
		for dc, mw := range remoteGWs.lists {
			if !slices.Contains(gatewayDCs, dc) {
				mw.cancel()
				delete(remoteGWs.lists, dc)
				delete(remoteGWs.names, dc)
				reconcileGateways(remoteGWs, dc, nil, start, nil)
			}
		}
		for _, dc := range gatewayDCs {
			if remoteGWs.lists[dc] == nil {
				start(remoteGWs.lists, dc, w.runGatewayList(dc, send, join))
				remoteGWs.lists[dc].remote = true
			}
		}
		if !w.cfg.Central {
			return
		}
		for _, s := range w.leafServices() {
			services[s] = true
		}
		for s, mw := range leafW {
			if !services[s] {
				mw.cancel()
				delete(leafW, s)
				delete(leaves, s)
			}
		}
		for _, s := range slices.Sorted(maps.Keys(services)) {
			if leafW[s] == nil {
				start(leafW, s, runLeaf(s))
			}
		}
	}
	complete := func() bool {
		if !listRead || nativeList == nil || rootList == nil || def == "" {
			return false
		}
		for _, mw := range proxyW {
			if !mw.read {
				return false
			}
		}
		for _, set := range []map[string]*meshWatch{leafW, connectW} {
			for _, mw := range set {
				if !mw.read && !mw.remote {
					return false
				}
			}
		}
		return true
	}
	var names []string
	for {
		var ev meshEvent
		select {
		case <-ctx.Done():
			return nil
		case ev = <-events:
		case <-w.retarget:
			ev = meshEvent{kind: "targets", at: time.Now()}
		}
		switch ev.kind {
		case "list":
			listRead, names = true, ev.names
			reconcile(names)
		case "targets":
			if !listRead {
				continue // the first list's reconcile takes them
			}
			reconcile(names)
		case "natives":
			nativeList = append([]string{}, ev.names...) // never nil once read
		case "roots":
			rootList = ev.roots
		case "default":
			def = ev.def
		case "proxies":
			mw := proxyW[ev.key]
			if mw == nil || mw.gen != ev.gen {
				continue
			}
			mw.read = true
			proxies[ev.key] = ev.proxies
			reconcile(names)
		case "connect":
			mw := connectW[ev.key]
			if mw == nil || mw.gen != ev.gen {
				continue
			}
			mw.read = true
			endpoints[ev.key] = ev.proxies
		case "gwlist":
			mw := remoteGWs.lists[ev.key]
			if mw == nil || mw.gen != ev.gen {
				continue
			}
			mw.read = true
			remoteGWs.names[ev.key] = ev.names
			reconcileGateways(remoteGWs, ev.key, ev.names, start, func(name string) func(context.Context, uint64) {
				return w.runGatewayHealth(ev.key, name, send, join)
			})
		case "gateways":
			mw := remoteGWs.healths[ev.key]
			if mw == nil || mw.gen != ev.gen {
				continue
			}
			mw.read = true
			remoteGWs.gateways[ev.key] = ev.proxies
		case "leaf":
			mw := leafW[ev.key]
			if mw == nil || mw.gen != ev.gen {
				continue
			}
			mw.read = true
			leaves[ev.key] = *ev.leaf
		}
		// Before the first complete read nothing is published (a partial
		// mesh would serve sidecars without their upstreams); after it, a
		// new proxy service or leaf not read yet is only absent.
		if !published && !complete() {
			continue
		}
		published = true
		w.publish(proxies, endpoints, rootList, leaves, def, nativeList, remoteGWs.byDatacenter(), ev.at)
	}
}

func (w *MeshWatcher) publish(proxies, endpoints map[string][]Proxy, roots *api.CARootList, leaves map[string]Leaf, def ir.IntentionAction, natives []string, remote map[string][]Proxy, at time.Time) {
	m := &Mesh{TrustDomain: roots.TrustDomain, DefaultIntention: def, Leaves: maps.Clone(leaves), Endpoints: maps.Clone(endpoints), Natives: natives, RemoteGateways: remote}
	for _, ps := range proxies {
		m.Proxies = append(m.Proxies, ps...)
	}
	slices.SortFunc(m.Proxies, func(a, b Proxy) int { return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID)) })
	m.RootsPEM = rootsPEM(roots)
	publishLatest(w.updates, MeshUpdate{Mesh: m, ChangedAt: at}, func(u *MeshUpdate) *time.Time { return &u.ChangedAt })
}

// defaultIntention asks the agent for its ACL settings, as Consul's
// default intention follows them, retrying until it answers. An agent
// that refuses to say (403: ACLs are on, and the token may not read the
// agent) gets deny, the safe reading of an unknown default_policy.
func (w *MeshWatcher) defaultIntention(ctx context.Context) ir.IntentionAction {
	delay := w.cfg.Query.withDefaults().BackoffInitial
	for {
		self, err := w.cfg.Client.Agent().Self()
		if err == nil {
			return aclDefault(self)
		}
		var se api.StatusError
		if errors.As(err, &se) && se.Code == http.StatusForbidden {
			w.cfg.Logger.Warn().Err(err).Msg("cannot read the agent's ACL default policy; the default intention is deny (set mesh { default_intention } to choose)")
			return ir.IntentionDeny
		}
		w.cfg.Logger.Warn().Err(err).Msg("cannot read the agent's ACL settings; retrying")
		if !sleep(ctx, delay) {
			return ir.IntentionDeny
		}
		delay = min(delay*2, w.cfg.Query.withDefaults().BackoffMax)
	}
}

// rootsPEM is every root of the list, sorted by id.
func rootsPEM(roots *api.CARootList) string {
	rs := slices.Clone(roots.Roots)
	slices.SortFunc(rs, func(a, b *api.CARoot) int { return cmp.Compare(a.ID, b.ID) })
	var pem strings.Builder
	for _, r := range rs {
		pem.WriteString(strings.TrimSpace(r.RootCertPEM))
		pem.WriteString("\n")
	}
	return pem.String()
}
