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

// Mesh is one consistent view of Consul Connect as the bridge serves it:
// the registered connect-proxy sidecars with their own health, the CA's
// trust domain and roots, and (central mode) each sidecar service's leaf.
// Intentions and protocols come from config entries, which the daemon's
// config-entry watcher follows and sets here (Intentions, Protocols).
// Never mutated once published.
type Mesh struct {
	// Proxies sorted by (Node, ID): sidecars, and gateways (Kind set).
	Proxies []Proxy `json:"proxies"`
	// TerminatingGateways are, by gateway service name, the services its
	// terminating-gateway config entry links (gateways.go).
	TerminatingGateways map[string][]LinkedService `json:"terminating_gateways,omitempty"`
	// TrustDomain is the Connect CA's ("<cluster id>.consul").
	TrustDomain string `json:"trust_domain"`
	// RootsPEM holds every root the CA lists (sorted by id), so a peer
	// whose leaf is signed by a root being rotated out still verifies.
	RootsPEM string `json:"-"`
	// Endpoints are, by upstream (ServiceKey.String(): "api", or
	// "api@dc2" for an upstream in another datacenter), the instances
	// that accept its mesh traffic (/v1/health/connect/SERVICE: its
	// sidecars and its Connect-native instances), sorted by (Node, ID).
	// A service no sidecar dials is not read; a remote one whose
	// datacenter never answered is absent.
	Endpoints map[string][]Proxy `json:"endpoints,omitempty"`
	// Leaves are the services' leaf certificates by service, in central
	// mode only.
	Leaves map[string]Leaf `json:"-"`
	// DefaultIntention is Consul's default for callers no intention
	// matches, as the agent says: allow with ACLs off or their
	// default_policy allow, deny otherwise.
	DefaultIntention ir.IntentionAction `json:"default_intention"`
	// Intentions are the service-intentions config entries, sorted by
	// name; Protocols the service-defaults protocol of each service.
	Intentions []*api.ServiceIntentionsConfigEntry `json:"-"`
	Protocols  map[string]string                   `json:"protocols,omitempty"`
	// UpstreamOverrides are, by downstream service (the service-defaults
	// entry's name), its upstream_config overrides: how that service's
	// sidecars reach each upstream, which Consul applies to no other
	// caller.
	UpstreamOverrides map[string][]*api.UpstreamConfig `json:"-"`
	// Natives are the Connect-native services (connect { native = true }:
	// proxyless gRPC servers in the mesh), sorted.
	Natives []string `json:"natives,omitempty"`
	// MeshDestinationsOnly is the mesh config entry's
	// transparent_proxy.mesh_destinations_only: transparent proxies
	// refuse destinations outside the mesh instead of passing them
	// through. The config-entry watcher sets it, as Intentions.
	MeshDestinationsOnly bool `json:"mesh_destinations_only,omitempty"`
}

// Proxy is one registered connect-proxy instance.
type Proxy struct {
	// ID is the proxy's service id (the Envoy's node id), Name its
	// service name.
	ID, Name string
	// Kind is "" for a connect-proxy, else the gateway's (gateways.go).
	Kind       string `json:",omitempty"`
	Node       string
	Datacenter string
	NodeMeta   map[string]string `json:",omitempty"`
	// Tags and Meta are the proxy registration's own (a sidecar_service
	// inherits its service's unless it sets its own): what a
	// service-resolver subset filter tests in Consul's mesh.
	Tags []string          `json:",omitempty"`
	Meta map[string]string `json:",omitempty"`
	// Address is the proxy's service address, or its node's;
	// ServiceAddress the service address alone ("" if unset).
	Address        string
	ServiceAddress string `json:",omitempty"`
	Port           int
	// Service and ServiceID are the destination's
	// (proxy.destination_service_name and _id).
	Service, ServiceID string
	// LocalAddress and LocalPort are the local application's.
	LocalAddress string
	LocalPort    int
	// Protocol is proxy.config.protocol, "" if unset.
	Protocol  string     `json:",omitempty"`
	Upstreams []Upstream `json:",omitempty"`
	// Status aggregates the proxy's own and its node's checks.
	Status Status
	// Native marks a Connect-native instance (no sidecar: the service
	// itself speaks mTLS); Service and ServiceID are then its own.
	Native bool `json:",omitempty"`
	// Mode is proxy.mode ("transparent", "direct" or "" for the default),
	// OutboundPort its transparent_proxy.outbound_listener_port (0: unset).
	Mode         string `json:",omitempty"`
	OutboundPort int    `json:",omitempty"`
	// VirtualIP is the virtual IP Consul assigned the destination
	// service (tagged address "consul-virtual"), "" if none.
	VirtualIP string `json:",omitempty"`
}

// Services lists, sorted, every service the mesh's sidecars front or
// dial: their destinations' health is what the watcher must read
// besides the proxies' (a mesh endpoint is healthy only when both pass).
func (m *Mesh) Services() []ServiceKey {
	if m == nil {
		return nil
	}
	set := map[ServiceKey]bool{}
	for _, n := range m.Natives {
		set[ServiceKey{Name: n}] = true // proxyless gRPC servers: their instances are the servers
	}
	for _, p := range m.Proxies {
		if p.Kind != "" {
			continue // a gateway fronts no destination of its own
		}
		set[ServiceKey{Name: p.Service}] = true
		for _, k := range p.upstreamKeys() {
			set[k] = true
		}
	}
	return slices.SortedFunc(maps.Keys(set), compareKeys)
}

// upstreamKeys are the service upstreams of p, Datacenter "" for p's own.
func (p Proxy) upstreamKeys() []ServiceKey {
	var out []ServiceKey
	for _, u := range p.Upstreams {
		if (u.Type != "" && u.Type != "service") || u.Service == "" {
			continue
		}
		k := ServiceKey{Name: u.Service}
		if u.Datacenter != p.Datacenter {
			k.Datacenter = u.Datacenter
		}
		out = append(out, k)
	}
	return out
}

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
	select {
	case w.retarget <- struct{}{}:
	default:
	}
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
	result := func(endpoint string) func(error, time.Duration) {
		if w.cfg.OnQuery == nil {
			return nil
		}
		return func(err error, d time.Duration) { w.cfg.OnQuery(endpoint, "", err, d) }
	}
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
				equal: equalProxies, opts: opts, log: log, result: result("health_connect"),
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
		w.publish(proxies, endpoints, rootList, leaves, def, nativeList, ev.at)
	}
}

func (w *MeshWatcher) publish(proxies, endpoints map[string][]Proxy, roots *api.CARootList, leaves map[string]Leaf, def ir.IntentionAction, natives []string, at time.Time) {
	m := &Mesh{TrustDomain: roots.TrustDomain, DefaultIntention: def, Leaves: maps.Clone(leaves), Endpoints: maps.Clone(endpoints), Natives: natives}
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
