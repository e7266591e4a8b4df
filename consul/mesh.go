package consul

import (
	"cmp"
	"context"
	"errors"
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
	// Proxies sorted by (Node, ID).
	Proxies []Proxy `json:"proxies"`
	// TrustDomain is the Connect CA's ("<cluster id>.consul").
	TrustDomain string `json:"trust_domain"`
	// RootsPEM holds every root the CA lists (sorted by id), so a peer
	// whose leaf is signed by a root being rotated out still verifies.
	RootsPEM string `json:"-"`
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
}

// Proxy is one registered connect-proxy instance.
type Proxy struct {
	// ID is the proxy's service id (the Envoy's node id), Name its
	// service name.
	ID, Name   string
	Node       string
	Datacenter string
	NodeMeta   map[string]string `json:",omitempty"`
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
}

// Upstream is one upstream of a proxy registration.
type Upstream struct {
	// Type is "service" ("" in Consul's API) or "prepared_query".
	Type        string `json:",omitempty"`
	Service     string
	Datacenter  string `json:",omitempty"`
	BindAddress string `json:",omitempty"`
	BindPort    int
	Protocol    string `json:",omitempty"`
}

// Leaf is a service's Connect leaf certificate.
type Leaf struct {
	CertPEM string
	KeyPEM  ir.Redacted
	// ServiceURI is its SPIFFE id; ValidBefore when it expires.
	ServiceURI  string
	ValidBefore time.Time
}

// Services lists, sorted, every service the mesh's sidecars front or
// dial: their destinations' health is what the watcher must read
// besides the proxies' (a mesh endpoint is healthy only when both pass).
func (m *Mesh) Services() []ServiceKey {
	if m == nil {
		return nil
	}
	set := map[ServiceKey]bool{}
	for _, p := range m.Proxies {
		set[ServiceKey{Name: p.Service}] = true
	}
	return slices.SortedFunc(maps.Keys(set), compareKeys)
}

// MeshConfig configures a MeshWatcher.
type MeshConfig struct {
	Client *api.Client
	Query  QueryOptions
	// Central also follows every sidecar service's leaf certificate
	// through the agent (blocking), with the client's token.
	Central bool
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
}

// NewMeshWatcher returns a watcher; Run starts it.
func NewMeshWatcher(cfg MeshConfig) *MeshWatcher {
	return &MeshWatcher{cfg: cfg, updates: make(chan MeshUpdate, 1)}
}

// Updates delivers the newest mesh; an unread one is replaced.
func (w *MeshWatcher) Updates() <-chan MeshUpdate { return w.updates }

// proxyFilter selects connect-proxy services from the catalog list.
const proxyFilter = `ServiceKind == "connect-proxy"`

type meshEvent struct {
	kind    string // "list", "proxies", "roots", "leaf", "default"
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
	list := view[[]string]{
		id: "catalog_services(connect-proxy)",
		fetch: func(q *api.QueryOptions) ([]string, *api.QueryMeta, error) {
			q.Filter = proxyFilter
			m, meta, err := w.cfg.Client.Catalog().Services(q)
			return slices.Sorted(maps.Keys(m)), meta, err
		},
		equal: slices.Equal[[]string], opts: w.cfg.Query, log: log, result: result("catalog_services"),
	}
	wg.Go(func() {
		list.run(ctx, func(names []string, _ uint64, at time.Time) { send(ctx, meshEvent{kind: "list", names: names, at: at}) })
	})
	roots := view[*api.CARootList]{
		id: "connect_ca_roots",
		fetch: func(q *api.QueryOptions) (*api.CARootList, *api.QueryMeta, error) {
			return w.cfg.Client.Connect().CARoots(q)
		},
		equal: equalRoots, opts: w.cfg.Query, log: log, result: result("connect_ca_roots"),
	}
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
		proxies   = map[string][]Proxy{}
		leaves    = map[string]Leaf{}
		listRead  bool
		rootList  *api.CARootList
		def       ir.IntentionAction
		published bool
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
			v.run(ctx, func(p []Proxy, _ uint64, at time.Time) {
				send(ctx, meshEvent{kind: "proxies", key: name, gen: g, proxies: p, at: at})
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
					if err != nil || l == nil {
						return nil, meta, err
					}
					return &Leaf{CertPEM: l.CertPEM, KeyPEM: ir.Redacted(l.PrivateKeyPEM), ServiceURI: l.ServiceURI, ValidBefore: l.ValidBefore}, meta, nil
				},
				equal: func(a, b *Leaf) bool {
					return a != nil && b != nil && a.CertPEM == b.CertPEM && string(a.KeyPEM) == string(b.KeyPEM)
				},
				opts: w.cfg.Query, log: log, result: result("connect_ca_leaf"),
			}
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
		if !w.cfg.Central {
			return
		}
		services := map[string]bool{}
		for _, ps := range proxies {
			for _, p := range ps {
				services[p.Service] = true
			}
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
		if !listRead || rootList == nil || def == "" {
			return false
		}
		for _, mw := range proxyW {
			if !mw.read {
				return false
			}
		}
		for _, mw := range leafW {
			if !mw.read {
				return false
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
		}
		switch ev.kind {
		case "list":
			listRead, names = true, ev.names
			reconcile(names)
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
		w.publish(proxies, rootList, leaves, def, ev.at)
	}
}

func (w *MeshWatcher) publish(proxies map[string][]Proxy, roots *api.CARootList, leaves map[string]Leaf, def ir.IntentionAction, at time.Time) {
	m := &Mesh{TrustDomain: roots.TrustDomain, DefaultIntention: def, Leaves: maps.Clone(leaves)}
	for _, ps := range proxies {
		m.Proxies = append(m.Proxies, ps...)
	}
	slices.SortFunc(m.Proxies, func(a, b Proxy) int { return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID)) })
	rs := slices.Clone(roots.Roots)
	slices.SortFunc(rs, func(a, b *api.CARoot) int { return cmp.Compare(a.ID, b.ID) })
	var pem strings.Builder
	for _, r := range rs {
		pem.WriteString(strings.TrimSpace(r.RootCertPEM))
		pem.WriteString("\n")
	}
	m.RootsPEM = pem.String()
	select {
	case old := <-w.updates:
		if old.ChangedAt.Before(at) {
			at = old.ChangedAt
		}
	default:
	}
	w.updates <- MeshUpdate{Mesh: m, ChangedAt: at}
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

// aclDefault reads /v1/agent/self's DebugConfig: Consul's default
// intention is allow with ACLs disabled, else the ACL default_policy.
func aclDefault(self map[string]map[string]any) ir.IntentionAction {
	dc := self["DebugConfig"]
	enabled, _ := dc["ACLsEnabled"].(bool)
	policy := "deny"
	if rs, ok := dc["ACLResolverSettings"].(map[string]any); ok {
		if e, ok := rs["ACLsEnabled"].(bool); ok {
			enabled = enabled || e
		}
		if p, ok := rs["ACLDefaultPolicy"].(string); ok {
			policy = p
		}
	}
	if !enabled || policy == "allow" {
		return ir.IntentionAllow
	}
	return ir.IntentionDeny
}

// NewProxies normalises a proxy service's /v1/health/service response:
// connect-proxy instances only, node address as fallback, status
// aggregated as for any instance, sorted.
func NewProxies(entries []*api.ServiceEntry) []Proxy {
	var out []Proxy
	for _, e := range entries {
		if e == nil || e.Node == nil || e.Service == nil || e.Service.Kind != api.ServiceKindConnectProxy || e.Service.Proxy == nil {
			continue
		}
		s, px := e.Service, e.Service.Proxy
		p := Proxy{
			ID: s.ID, Name: s.Service, Node: e.Node.Node, Datacenter: e.Node.Datacenter, NodeMeta: mapCopy(e.Node.Meta),
			Address: cmp.Or(s.Address, e.Node.Address), ServiceAddress: s.Address, Port: s.Port,
			Service: px.DestinationServiceName, ServiceID: cmp.Or(px.DestinationServiceID, px.DestinationServiceName),
			LocalAddress: px.LocalServiceAddress, LocalPort: px.LocalServicePort,
			Protocol: configString(px.Config, "protocol"),
			Status:   aggregate(e.Checks),
		}
		for _, u := range px.Upstreams {
			p.Upstreams = append(p.Upstreams, Upstream{
				Type: string(u.DestinationType), Service: u.DestinationName, Datacenter: u.Datacenter,
				BindAddress: u.LocalBindAddress, BindPort: u.LocalBindPort, Protocol: configString(u.Config, "protocol"),
			})
		}
		slices.SortFunc(p.Upstreams, func(a, b Upstream) int {
			return cmp.Or(cmp.Compare(a.BindPort, b.BindPort), cmp.Compare(a.BindAddress, b.BindAddress))
		})
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Proxy) int { return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID)) })
	return out
}

func configString(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func equalProxies(a, b []Proxy) bool {
	return slices.EqualFunc(a, b, func(x, y Proxy) bool {
		return x.ID == y.ID && x.Name == y.Name && x.Node == y.Node && x.Datacenter == y.Datacenter &&
			maps.Equal(x.NodeMeta, y.NodeMeta) && x.Address == y.Address && x.ServiceAddress == y.ServiceAddress && x.Port == y.Port &&
			x.Service == y.Service && x.ServiceID == y.ServiceID && x.LocalAddress == y.LocalAddress &&
			x.LocalPort == y.LocalPort && x.Protocol == y.Protocol && x.Status == y.Status &&
			slices.Equal(x.Upstreams, y.Upstreams)
	})
}

func equalRoots(a, b *api.CARootList) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.TrustDomain == b.TrustDomain && a.ActiveRootID == b.ActiveRootID &&
		slices.EqualFunc(a.Roots, b.Roots, func(x, y *api.CARoot) bool { return x.ID == y.ID && x.RootCertPEM == y.RootCertPEM })
}
