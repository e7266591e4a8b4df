package model

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// The service mesh: one group per registered connect-proxy (named
// ir.SidecarGroupName(node, proxy id), which a sidecar Envoy is keyed to
// by its node id), and one per policy group declared sidecar_for. Their
// listeners are derived by the translator from Group.Sidecar; here we
// resolve what those listeners need: the local application's cluster,
// the mesh clusters of the upstreams (endpoints: the upstreams' sidecars)
// and the intentions of the destination.

// localAppCluster names a sidecar's cluster of its local application.
// "/" and ":" cannot be in a service or subset name, so it cannot clash
// with a service cluster.
func localAppCluster(group string) string { return group + "/local_app" }

// meshProtocols are the protocols a sidecar or upstream may have.
var meshProtocols = []string{"tcp", "http", "http2", "grpc"}

// mesh adds the sidecar groups and their clusters to m.
func (b *builder) mesh(m *ir.Model) {
	var mesh *consul.Mesh
	if b.cat != nil {
		mesh = b.cat.Mesh
	}
	sidecarFor := slices.ContainsFunc(b.pol.Proxies, func(p *policy.Proxy) bool { return p.SidecarFor != "" })
	if mesh == nil {
		if b.pol.Mesh != nil || sidecarFor {
			b.warn("the policy declares a service mesh but no Connect data has been read from Consul yet; sidecar groups get nothing")
		}
		return
	}
	if mesh.TrustDomain == "" {
		b.warn("the Connect CA reports no trust domain (is Connect enabled on the Consul servers?); no sidecar is served")
		return
	}
	m.Mesh = &ir.Mesh{TrustDomain: mesh.TrustDomain, Central: b.pol.Mesh != nil && b.pol.Mesh.Mode == policy.MeshCentral}
	def := mesh.DefaultIntention
	if b.pol.Mesh != nil && b.pol.Mesh.DefaultIntention != "" {
		def = b.pol.Mesh.DefaultIntention
	}
	if def == "" {
		def = ir.IntentionAllow
	}
	mb := &meshBuilder{b: b, m: m, mesh: mesh, def: def, intentions: newIntentionResolver(mesh.Intentions, def), clusters: map[string]ir.Cluster{}, dialers: map[string]map[string]bool{}, gatewayModes: map[string]string{}}

	var groups []ir.Group
	for _, p := range mesh.Proxies {
		if p.IsGateway() {
			continue // gateways.go
		}
		name := ir.SidecarGroupName(p.Node, p.ID)
		if g, ok := mb.group(name, p); ok {
			groups = append(groups, g)
		}
	}
	// A policy group declared sidecar_for takes the first registered
	// sidecar of its service (by node, then proxy id).
	for i := range m.Groups {
		g := &m.Groups[i]
		pp := b.pol.ProxyFor(g.Name)
		if pp == nil || pp.SidecarFor == "" {
			continue
		}
		j := slices.IndexFunc(mesh.Proxies, func(p consul.Proxy) bool { return p.Service == pp.SidecarFor })
		if j < 0 {
			b.warn("proxy %q is sidecar_for %q, which has no registered Connect sidecar; its proxies get nothing until one registers", g.Name, pp.SidecarFor)
			g.Clusters = []string{}
			continue
		}
		if sg, ok := mb.group(g.Name, mesh.Proxies[j]); ok {
			*g = sg
		}
	}
	mb.finish(groups)
	mb.gateways()
}

type meshBuilder struct {
	b    *builder
	m    *ir.Model
	mesh *consul.Mesh
	def  ir.IntentionAction
	// intentions resolves each destination's intentions once.
	intentions *intentionResolver
	// clusters are the mesh and local-app clusters made so far, by name.
	clusters map[string]ir.Cluster
	// dialers are the local services of the sidecars that dial each
	// upstream mesh cluster, by the cluster's Consul name: the client
	// certificate is the dialer's leaf, so a cluster dialed by sidecars
	// of two services is two clusters (see meshClusterFor).
	dialers map[string]map[string]bool
	// pending upstream references, resolved in finish once every dialer
	// is known.
	refs []meshRef
	// gatewayModes are the mesh gateway modes (local or remote) of the
	// upstreams' clusters, by the cluster's Consul name
	// (meshgatewaymode.go).
	gatewayModes map[string]string
}

// meshRef is an upstream, or a route target of one, whose cluster name
// waits for finish.
type meshRef struct {
	group    string
	upstream int
	// route and target, when route >= 0, place the reference in the
	// upstream's Routes[route].Clusters[target]; route -1 is the
	// upstream's own Cluster.
	route, target int
	base          string // Consul's name of the cluster
	local         string // the dialing sidecar's service
	// named: the reference only names the cluster (an upstream whose
	// routes send elsewhere keeps its own cluster's name); the group does
	// not get the cluster for it.
	named bool
}

func (mb *meshBuilder) group(name string, p consul.Proxy) (ir.Group, bool) {
	b := mb.b
	who := fmt.Sprintf("Connect sidecar %q on node %q", p.ID, p.Node)
	if p.Service == "" || !ir.QueryableServiceName(p.Service) {
		b.warn("%s: destination service %q is not a service the bridge can serve; skipped", who, p.Service)
		return ir.Group{}, false
	}
	if p.Port <= 0 || p.Port > 65535 || p.LocalPort <= 0 || p.LocalPort > 65535 {
		b.warn("%s: port %d or local service port %d is out of range; skipped", who, p.Port, p.LocalPort)
		return ir.Group{}, false
	}
	localAddr := cmp.Or(p.LocalAddress, "127.0.0.1")
	addr, err := netip.ParseAddr(localAddr)
	if err != nil {
		b.warn("%s: local service address %q is not an IP address; skipped", who, localAddr)
		return ir.Group{}, false
	}
	if mb.m.Mesh.Central {
		leaf, ok := mb.mesh.Leaves[p.Service]
		if !ok || leaf.CertPEM == "" || len(leaf.KeyPEM) == 0 {
			// Leaves, once read, are kept through Consul errors, so this
			// is a sidecar new since the last read (or a token that may
			// not sign for it): the group is left out rather than served
			// listeners that wait for a certificate that may never come.
			b.warn("%s: no leaf certificate of %q read from Consul (central mode needs a token allowed to sign for it, service:write); not served until there is", who, p.Service)
			return ir.Group{}, false
		}
	}
	dc := p.Datacenter
	sc := &ir.Sidecar{
		ProxyID: p.ID, Node: p.Node, Service: p.Service, Datacenter: dc,
		Port: uint32(p.Port), LocalAddress: localAddr, LocalPort: uint32(p.LocalPort),
		LocalCluster: localAppCluster(name),
		Protocol:     mb.protocol(who, p.Protocol, p.Service),
	}
	// The public listener binds the proxy's own service address if it
	// has one, else every interface.
	sc.Address = p.ServiceAddress
	in, err := mb.intentions.resolve(p.Service)
	if err != nil {
		// Serving fewer checks than asked would let callers in: the
		// sidecar gets deny-all instead, and the operator a warning.
		b.warn("%s: intentions of %q cannot be enforced (%v); every caller is denied until fixed", who, p.Service, err)
		in = ir.Intentions{Default: ir.IntentionDeny}
	}
	sc.Intentions = in
	settings := meshServiceSettings(b.pol, p.Service)
	local := ir.Cluster{
		Name: sc.LocalCluster, Service: p.Service, ConnectTimeout: settings.ConnectTimeout,
		HTTP2:     sc.Protocol == "http2" || sc.Protocol == "grpc",
		Endpoints: []ir.Endpoint{{Address: addr.Unmap(), Port: uint32(p.LocalPort), Health: ir.Healthy, Weight: 1}},
	}
	mb.clusters[local.Name] = local
	seen := map[string]bool{}
	for _, u := range p.Upstreams {
		if u.Type != "" && u.Type != "service" {
			b.warn("%s: upstream %q is a %s; only service upstreams are served", who, u.Service, u.Type)
			continue
		}
		bind := fmt.Sprintf("%s:%d", cmp.Or(u.BindAddress, "127.0.0.1"), u.BindPort)
		if u.BindPort <= 0 || u.BindPort > 65535 || uint32(u.BindPort) == sc.Port || seen[bind] {
			b.warn("%s: upstream %q binds %s, out of range or already taken; skipped", who, u.Service, bind)
			continue
		}
		if !ir.QueryableServiceName(u.Service) {
			b.warn("%s: upstream %q is not a service name; skipped", who, u.Service)
			continue
		}
		seen[bind] = true
		udc := cmp.Or(u.Datacenter, dc)
		base := ir.MeshClusterName(u.Service, udc, mb.mesh.TrustDomain)
		mu := ir.MeshUpstream{
			Service: u.Service, Datacenter: u.Datacenter,
			BindAddress: cmp.Or(u.BindAddress, "127.0.0.1"), BindPort: uint32(u.BindPort),
			Protocol: mb.protocol(who, u.Protocol, u.Service),
		}
		// The upstream's gateway mode applies to every cluster of its
		// chain (route targets and failover targets too), and an
		// override prefixes all their names, as Consul's does.
		via := mb.upstreamGatewayMode(who, p, u)
		mu.Routes = mb.upstreamRoutes(who, name, len(sc.Upstreams), &mu, udc, dc, p.Service, via)
		// An upstream with routes dials what they target, as Consul's
		// chain does: its own cluster only if a route sends there.
		own := mu.Routes == nil
		if t := tcpChainTarget(b.pol.MeshRoutesFor(u.Service)); own && t != nil && !ir.HTTPProtocol(mu.Protocol) && udc == dc {
			base = via.prefix + ir.MeshSubsetClusterName(t.Subset, t.Service, udc, mb.mesh.TrustDomain)
			mb.dial(base, via.mode, t.Service, t.Subset, udc, dc, mu.Protocol, p.Service)
		} else if own {
			base = via.prefix + base
			mb.dial(base, via.mode, u.Service, "", udc, dc, mu.Protocol, p.Service)
		}
		mb.refs = append(mb.refs, meshRef{group: name, upstream: len(sc.Upstreams), route: -1, base: base, local: p.Service, named: !own})
		sc.Upstreams = append(sc.Upstreams, mu)
	}
	g := ir.Group{Name: name, Sidecar: sc, Listeners: nil, Clusters: []string{local.Name}}
	if p.Transparent() {
		g.Clusters = append(g.Clusters, mb.transparent(who, name, p, sc)...)
	}
	if m := mb.m.Mesh; m.Central {
		leaf := mb.mesh.Leaves[p.Service]
		g.Secrets = append(g.Secrets, ir.Secret{Name: ir.LeafSecretPrefix + p.Service, CertificateChain: []byte(leaf.CertPEM), PrivateKey: leaf.KeyPEM})
		g.Secrets = append(g.Secrets, ir.Secret{Name: ir.RootsSecretName, TrustedCA: []byte(mb.mesh.RootsPEM)})
		slices.SortFunc(g.Secrets, func(a, b ir.Secret) int { return strings.Compare(a.Name, b.Name) })
	}
	return g, true
}

// protocol is the first of the registration's, service-defaults' and
// "tcp" (Consul's order); one the bridge cannot serve is tcp, warned.
func (mb *meshBuilder) protocol(who, proxy, service string) string {
	p := strings.ToLower(cmp.Or(proxy, mb.mesh.Protocols[service], "tcp"))
	if !slices.Contains(meshProtocols, p) {
		mb.b.warn("%s: protocol %q of %q is not one of %s; served as tcp", who, p, service, strings.Join(meshProtocols, ", "))
		return "tcp"
	}
	return p
}

// meshCluster is the cluster of service's sidecars in dc, reached
// through mesh gateways when mode (local or remote) says so and dc is not
// localDC: TLS to the sidecars with the roots and the service's SPIFFE id
// in dc. The client certificate is filled in finish, once its dialers are
// known.
func (mb *meshBuilder) meshCluster(name, service, subset, dc, localDC, protocol, mode string) ir.Cluster {
	s := meshServiceSettings(mb.b.pol, service)
	c := ir.Cluster{
		Name: name, Service: service, ConnectTimeout: s.ConnectTimeout, LBPolicy: s.LBPolicy,
		HTTP2:          protocol == "http2" || protocol == "grpc",
		CircuitBreaker: s.CircuitBreaker, OutlierDetection: s.OutlierDetection, ZoneAware: s.ZoneAware,
		TLS: &ir.UpstreamTLS{SNI: sniOf(name), CASecret: ir.RootsSecretName, MatchURISANs: []string{ir.SPIFFEID(mb.mesh.TrustDomain, dc, service)}},
	}
	c.Endpoints = mb.meshEndpoints(name, service, subset, s, dc, localDC)
	if dc != localDC && (mode == gatewayModeLocal || mode == gatewayModeRemote) {
		c.Endpoints = mb.gatewayEndpoints(name, mode, dc, localDC, c.Endpoints)
	}
	return c
}

// meshEndpoints are service's mesh endpoints in dc: what
// /v1/health/connect says accepts its mesh traffic (its sidecars and
// Connect-native instances), keyed as the watcher and the catalog key it
// ("" is the local datacenter). A service absent from a mesh read from
// Consul has not been read (yet) and gets none. Without any (a mesh read
// from a fixture), the registered sidecars of the service.
func (mb *meshBuilder) meshEndpoints(name, service, subset string, s *policy.Service, dc, localDC string) []ir.Endpoint {
	b := mb.b
	keyDC := dc
	if dc == localDC {
		keyDC = ""
	}
	key := consul.ServiceKey{Datacenter: keyDC, Name: service}
	sidecars, read := mb.mesh.Endpoints[key.String()]
	if !read && mb.mesh.Endpoints == nil {
		for _, p := range mb.mesh.Proxies {
			if p.Service == service {
				sidecars = append(sidecars, p)
			}
		}
	}
	sidecars = slices.DeleteFunc(slices.Clone(sidecars), func(p consul.Proxy) bool { return p.Datacenter != dc })
	if subset != "" {
		// Consul tests a subset's filter on the proxy's own registration
		// (which a sidecar_service inherits from its service).
		sub := s.SubsetNamed(subset)
		if sub == nil {
			b.warn("mesh cluster %q: service %q declares no subset %q; no endpoints", name, service, subset)
			return nil
		}
		sidecars = slices.DeleteFunc(sidecars, func(p consul.Proxy) bool {
			return !matchesSubset(consul.Instance{Tags: p.Tags, Meta: p.Meta}, sub)
		})
	}
	if len(sidecars) == 0 {
		b.warn("mesh cluster %q: service %q has no Connect sidecar in datacenter %q (yet)", name, service, dc)
	}
	dest := b.cat.Service(keyDC, service)
	var out []ir.Endpoint
	for _, p := range sidecars {
		in := consul.Instance{ID: p.ID, Node: p.Node, Datacenter: p.Datacenter, Address: p.Address, Port: p.Port, NodeMeta: p.NodeMeta, Status: p.Status}
		// A sidecar forwards to its destination instance: it is healthy
		// only when both pass (Consul's sidecar_service adds an alias
		// check for this; a hand-registered proxy may lack it).
		if !p.Native && !p.IsGateway() { // a gateway's health is its own
			in.Status = worse(in.Status, destinationStatus(dest, p))
		}
		ep, warn := endpoint(in, s.OnlyPassing)
		if warn != "" {
			b.warn("Connect sidecar %q of %q on node %q: %s", p.ID, service, p.Node, warn)
			continue
		}
		out = append(out, ep)
	}
	return out
}

// destinationStatus is the health of the instance a sidecar fronts;
// critical when the catalog has no such instance (nothing to forward to).
func destinationStatus(dest *consul.Service, p consul.Proxy) consul.Status {
	if dest == nil {
		return consul.StatusCritical
	}
	for _, in := range dest.Instances {
		if in.Node == p.Node && in.ID == p.ServiceID {
			return in.Status
		}
	}
	return consul.StatusCritical
}

func worse(a, b consul.Status) consul.Status {
	if b.WorseThan(a) {
		return b
	}
	return a
}

// finish names the mesh clusters, adds them and the groups to m, and
// sets the groups' clusters. A mesh cluster dialed by sidecars of one
// service keeps Consul's name; one dialed by sidecars of several services
// becomes one cluster per dialing service, named NAME/SERVICE, because
// each presents its own leaf (the SNI stays Consul's name).
func (mb *meshBuilder) finish(groups []ir.Group) {
	m := mb.m
	byName := map[string]*ir.Group{}
	for i := range groups {
		byName[groups[i].Name] = &groups[i]
	}
	for i := range m.Groups {
		if m.Groups[i].Sidecar != nil {
			byName[m.Groups[i].Name] = &m.Groups[i]
		}
	}
	mb.shareAggregateDialers()
	out := map[string]ir.Cluster{}
	for k, c := range mb.clusters {
		base, ok := strings.CutPrefix(k, "mesh\x00")
		if !ok {
			out[k] = c
			continue
		}
		locals := slices.Sorted(maps.Keys(mb.dialers[base]))
		for _, local := range locals {
			cc := c
			if c.TLS != nil {
				t := *c.TLS
				t.CertificateSecret = ir.LeafSecretPrefix + local
				cc.TLS = &t
				applyOverride(&cc, mb.mesh.UpstreamOverrides[local])
			}
			if len(c.Aggregate) > 0 {
				cc.Aggregate = make([]string, len(c.Aggregate))
				for i, m := range c.Aggregate {
					cc.Aggregate[i] = mb.memberName(m, local)
				}
			}
			if len(locals) > 1 {
				cc.Name = base + "/" + local
			}
			out[cc.Name] = cc
		}
	}
	for _, r := range mb.refs {
		g := byName[r.group]
		name := r.base
		if len(mb.dialers[r.base]) > 1 {
			name = r.base + "/" + r.local
		}
		u := &g.Sidecar.Upstreams[r.upstream]
		if r.route >= 0 {
			u.Routes[r.route].Clusters[r.target].Name = name
		} else {
			u.Cluster = name
		}
		if !r.named {
			g.Clusters = append(g.Clusters, name)
			for _, m := range mb.clusters["mesh\x00"+r.base].Aggregate {
				g.Clusters = append(g.Clusters, mb.memberName(m, r.local))
			}
		}
	}
	for _, g := range byName {
		slices.Sort(g.Clusters)
		g.Clusters = slices.Compact(g.Clusters)
	}
	existing := map[string]bool{}
	for _, c := range m.Clusters {
		existing[c.Name] = true
	}
	for _, n := range slices.Sorted(maps.Keys(out)) {
		c := out[n]
		if existing[n] {
			// Impossible with the names above; never replace a service.
			mb.b.warn("mesh cluster %q clashes with a cluster of the same name; skipped", n)
			continue
		}
		m.Clusters = append(m.Clusters, &c)
	}
	slices.SortFunc(m.Clusters, func(a, b *ir.Cluster) int { return strings.Compare(a.Name, b.Name) })
	m.Groups = append(m.Groups, groups...)
	slices.SortFunc(m.Groups, func(a, b ir.Group) int { return strings.Compare(a.Name, b.Name) })
}

// meshServiceSettings are the policy's settings for a Consul service the
// mesh names (registrations name Consul services, not policy blocks): the
// block of that name, else the first local block whose consul_service it
// is, else the defaults.
func meshServiceSettings(pol *policy.Policy, consulName string) *policy.Service {
	if s := pol.Service(consulName); s != nil && s.ConsulName == consulName {
		return s
	}
	for _, s := range pol.Services {
		if s.ConsulName == consulName && s.Datacenter == "" {
			return s
		}
	}
	return serviceSettings(nil, consulName)
}
