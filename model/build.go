// Package model is the pure join of the Consul catalog and the routing
// policy into the ir.Model the proxies get: Build resolves services,
// subsets, failover tiers, routes and TLS secrets; WatchTargets says what
// of the catalog a policy needs; HoldDowngrades smooths the health flaps
// of a Consul that comes back from an outage. Everything here is a
// function of its arguments: no I/O, no clock, no goroutines. The daemon
// that watches, debounces and serves around it is package bridge.
package model

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/tagroute"
)

// maxWeight keeps the sum of weights in one locality far below Envoy's
// uint32 limit even with tens of thousands of endpoints, while preserving
// Consul's full weight range.
const maxWeight = 65535

// Build resolves what proxies should get from a catalog and a policy. It is
// pure: no I/O, no clock, output sorted. Odd catalog data (an instance whose
// address is a hostname, a zero port) is left out and reported as a warning,
// never an error, so one bad registration cannot stop a fleet's updates.
// A nil policy mirrors the catalog: one cluster per service.
func Build(cat *consul.Catalog, pol *policy.Policy) (*ir.Model, []string) {
	m, warnings, _ := BuildIndexed(cat, pol)
	return m, warnings
}

// BuildIndexed is Build that also returns the EndpointIndex of the model
// it built, from which [EndpointIndex.Rebuild] turns a later catalog that
// differs only in instance health into the same model without building
// the rest of it again.
func BuildIndexed(cat *consul.Catalog, pol *policy.Policy) (*ir.Model, []string, *EndpointIndex) {
	index := newEndpointIndex(cat, pol)
	if pol == nil {
		pol = &policy.Policy{ExportAllServices: true, UnmatchedNodes: policy.UnmatchedAll}
	}
	b := newBuilder(cat, pol)
	b.index = index
	tags := b.tagRoutes()
	for _, name := range clusterServices(cat, pol) {
		b.service(name)
	}
	for _, name := range tagServices(tags) {
		if _, ok := b.clusters[name]; !ok {
			b.service(name)
		}
	}
	m := &ir.Model{}
	for _, name := range slices.Sorted(maps.Keys(b.clusters)) {
		c := b.clusters[name]
		m.Clusters = append(m.Clusters, &c)
	}
	m.Secrets = sortedSecrets(b.secrets)
	for _, p := range pol.Proxies {
		if strings.HasPrefix(p.Name, ir.SidecarGroupPrefix) {
			// Sidecar groups are keyed by node id, not node.cluster; a
			// policy group of that name would shadow one.
			b.warn("proxy %q: names starting with %q are reserved for Connect sidecars; the group is not served", p.Name, ir.SidecarGroupPrefix)
			continue
		}
		m.Groups = append(m.Groups, b.group(p, tags))
	}
	slices.SortFunc(m.Groups, func(a, b ir.Group) int { return strings.Compare(a.Name, b.Name) })
	var copies []ir.Cluster
	m.Proxyless, copies = b.proxyless(m.Clusters)
	if len(copies) > 0 {
		for i := range copies {
			m.Clusters = append(m.Clusters, &copies[i])
		}
		slices.SortFunc(m.Clusters, func(a, b *ir.Cluster) int { return strings.Compare(a.Name, b.Name) })
		b.index.noteCopies(copies)
	}
	b.reach(m)
	b.mesh(m)
	return m, b.warnings, b.index
}

// newBuilder is a builder of cat under pol that has built nothing yet.
func newBuilder(cat *consul.Catalog, pol *policy.Policy) *builder {
	b := &builder{cat: cat, pol: pol, clusters: map[string]ir.Cluster{}, owners: map[string]string{}, referenced: map[string]bool{}, secrets: map[string]ir.Secret{}}
	for _, name := range referencedServices(pol) {
		b.referenced[name] = true
	}
	return b
}

// WatchTargets is what the Consul watcher must watch for a policy: every
// service the policy names (in its datacenter and failover datacenters),
// and with export_all_services every local catalog service.
func WatchTargets(pol *policy.Policy) consul.Targets {
	if pol == nil {
		return consul.Targets{AllLocal: true}
	}
	t := consul.Targets{AllLocal: pol.ExportAllServices || usesTagRoutes(pol)}
	seen := map[consul.ServiceKey]bool{}
	add := func(k consul.ServiceKey) {
		if !seen[k] {
			seen[k] = true
			t.Services = append(t.Services, k)
		}
	}
	for _, name := range referencedServices(pol) {
		s := serviceSettings(pol, name)
		add(consul.ServiceKey{Datacenter: s.Datacenter, Name: s.ConsulName})
		for _, dc := range s.FailoverDatacenters {
			add(consul.ServiceKey{Datacenter: dc, Name: s.ConsulName})
		}
		for _, subset := range slices.Sorted(maps.Keys(s.Failover)) {
			for _, ft := range s.FailoverFor(subset) {
				add(consul.ServiceKey{Datacenter: ft.Datacenter, Name: ft.Service})
			}
		}
	}
	slices.SortFunc(t.Services, func(a, b consul.ServiceKey) int {
		return strings.Compare(a.Datacenter+"\x00"+a.Name, b.Datacenter+"\x00"+b.Name)
	})
	return t
}

// referencedServices lists service (cluster) names the policy declares or
// routes to, sorted.
func referencedServices(pol *policy.Policy) []string {
	set := map[string]bool{}
	for _, s := range pol.Services {
		set[s.Name] = true
	}
	for _, p := range pol.Proxies {
		for _, u := range p.Upstreams {
			// A proxyless group's upstream may name a grpc_service
			// rather than a service.
			if !p.Proxyless || pol.GRPCService(u) == nil {
				set[u] = true
			}
		}
		for _, l := range p.Listeners {
			for _, t := range l.TCP {
				set[t.Service] = true
			}
			for _, vh := range l.VirtualHosts {
				for _, r := range vh.Routes {
					for _, t := range r.Targets {
						set[t.Service] = true
					}
					if r.Mirror != nil {
						set[r.Mirror.Service] = true
					}
				}
			}
		}
	}
	for _, t := range grpcTargets(pol) {
		set[t.Service] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// clusterServices is every service that becomes a cluster.
func clusterServices(cat *consul.Catalog, pol *policy.Policy) []string {
	set := map[string]bool{}
	for _, n := range referencedServices(pol) {
		set[n] = true
	}
	if pol.ExportAllServices && cat != nil {
		for _, s := range cat.Services {
			if s.Datacenter == "" {
				set[s.Name] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// serviceSettings returns the policy's service block for name, or the
// defaults for a service the policy only routes to.
func serviceSettings(pol *policy.Policy, name string) *policy.Service {
	if s := pol.Service(name); s != nil {
		return s
	}
	return &policy.Service{
		Name:           name,
		ConsulName:     name,
		ConnectTimeout: policy.DefaultConnectTimeout,
		LBPolicy:       ir.LBRoundRobin,
	}
}

type builder struct {
	// referenced services get a warning when Consul has no instance of
	// them: a route to nothing is likely a typo or a missing deployment.
	referenced map[string]bool
	cat        *consul.Catalog
	pol        *policy.Policy
	clusters   map[string]ir.Cluster
	// owners says what made each cluster, to name both sides of a clash.
	owners map[string]string
	// secrets of upstream TLS, shared by every proxy.
	secrets  map[string]ir.Secret
	warnings []string
	// index records where the clusters' endpoints come from (nil: a
	// builder that only recomputes endpoints, see incremental.go);
	// reads collects the Consul services one service's clusters read.
	index *EndpointIndex
	reads map[consul.ServiceKey]bool
}

func (b *builder) warn(format string, args ...any) {
	b.warnings = append(b.warnings, fmt.Sprintf(format, args...))
}

// service adds the cluster of a service and one per declared subset.
func (b *builder) service(name string) {
	b.reads = map[consul.ServiceKey]bool{}
	clusters := b.serviceClusters(name)
	b.index.noteService(name, b.reads)
	b.reads = nil
	s := serviceSettings(b.pol, name)
	b.addCluster(clusters[0], fmt.Sprintf("Consul service %q", s.ConsulName))
	for i, sub := range s.Subsets {
		b.addCluster(clusters[i+1], fmt.Sprintf("subset %q of service %q", sub.Name, s.Name))
	}
}

// serviceClusters are the cluster of a service and one per declared
// subset, in that order, with their endpoints. It is the one place those
// are computed, for a whole Build and for an endpoint-only rebuild
// (incremental.go) alike, so the two cannot disagree.
func (b *builder) serviceClusters(name string) []ir.Cluster {
	s := serviceSettings(b.pol, name)
	tiers := [][]consul.Instance{b.instances(s.Datacenter, s.ConsulName)}
	for _, dc := range s.FailoverDatacenters {
		tiers = append(tiers, b.instances(dc, s.ConsulName))
	}
	if len(tiers[0]) == 0 && b.referenced[name] {
		where := "the local datacenter"
		if s.Datacenter != "" {
			where = "datacenter " + s.Datacenter
		}
		b.warn("service %q has no instances in %s (yet): cluster %q has no local endpoints%s", s.ConsulName, where, s.Name, b.didYouMean(s.ConsulName, s.Datacenter))
	}
	base := ir.Cluster{
		Name:             s.Name,
		Service:          s.ConsulName,
		ConnectTimeout:   s.ConnectTimeout,
		LBPolicy:         s.LBPolicy,
		HTTP2:            s.HTTP2,
		CircuitBreaker:   s.CircuitBreaker,
		OutlierDetection: s.OutlierDetection,
		ZoneAware:        s.ZoneAware,
		HealthCheck:      s.HealthCheck,
		TLS:              b.upstreamTLS(s),
	}
	out := make([]ir.Cluster, 0, 1+len(s.Subsets))
	c := base
	c.Endpoints = b.failoverEndpoints(s, tiers, nil)
	out = append(out, c)
	for _, sub := range s.Subsets {
		c := base
		c.Name = s.Name + "." + sub.Name
		c.Subset = sub.Name
		c.Endpoints = b.failoverEndpoints(s, tiers, &sub)
		out = append(out, c)
	}
	return out
}

// addCluster adds c, made from what; a second cluster of the same name
// (a Consul service called api.v2 beside subset v2 of api) is a conflict:
// the cluster is served for neither, with no endpoints, so a registration
// can never put its instances behind another service's subset.
func (b *builder) addCluster(c ir.Cluster, what string) {
	prev, dup := b.clusters[c.Name]
	if !dup {
		b.clusters[c.Name] = c
		b.owners[c.Name] = what
		return
	}
	b.warn("cluster %q is both %s and %s; it is served with no endpoints until one is renamed", c.Name, b.owners[c.Name], what)
	b.index.noteClash(c.Name)
	prev.Endpoints = nil
	b.clusters[c.Name] = prev
}

// Secret names. They depend on where a certificate is used, never on
// its contents, so a rotated certificate changes the secret only and the
// listener or cluster that refers to it keeps its version (Envoy does not
// drain a listener for a new certificate). Service and listener names
// have no "/", and listener resources are "<group>.<listener>", so the
// names cannot collide.
func upstreamCertSecret(service string) string        { return service + "/cert" }
func upstreamCASecret(service string) string          { return service + "/ca" }
func listenerCertSecret(listener, cert string) string { return listener + "/cert/" + cert }
func listenerClientCASecret(listener string) string   { return listener + "/client_ca" }

// upstreamTLS turns a service's tls block into secret references,
// recording the secrets; subsets share their service's.
func (b *builder) upstreamTLS(s *policy.Service) *ir.UpstreamTLS {
	t := s.TLS
	if t == nil {
		return nil
	}
	out := &ir.UpstreamTLS{SNI: t.SNI}
	if t.Cert != nil && t.Key != nil {
		out.CertificateSecret = upstreamCertSecret(s.Name)
		b.secrets[out.CertificateSecret] = ir.Secret{Name: out.CertificateSecret, CertificateChain: []byte(t.Cert.PEM), PrivateKey: t.Key.PEM}
	}
	if t.CA != nil {
		out.CASecret = upstreamCASecret(s.Name)
		b.secrets[out.CASecret] = ir.Secret{Name: out.CASecret, TrustedCA: []byte(t.CA.PEM)}
	}
	return out
}

// downstreamTLS turns a listener's tls block into secret references and
// adds the secrets it uses to the group's.
func downstreamTLS(name string, t *policy.ListenerTLS, secrets map[string]ir.Secret) *ir.DownstreamTLS {
	if t == nil {
		return nil
	}
	cert := func(c string) string {
		n := listenerCertSecret(name, c)
		if pc := t.Certificate(c); pc != nil {
			secrets[n] = ir.Secret{Name: n, CertificateChain: []byte(pc.Cert.PEM), PrivateKey: pc.Key.PEM}
		}
		return n
	}
	out := &ir.DownstreamTLS{
		DefaultCertificate: cert(t.Default),
		MinVersion:         t.MinVersion,
		MaxVersion:         t.MaxVersion,
		ALPN:               t.ALPN,
	}
	for _, s := range t.SNI {
		out.SNI = append(out.SNI, ir.SNICertificate{Secret: cert(s.Certificate), ServerNames: s.ServerNames})
	}
	slices.SortFunc(out.SNI, func(a, b ir.SNICertificate) int { return strings.Compare(a.Secret, b.Secret) })
	if t.ClientCA != nil {
		out.ClientCASecret = listenerClientCASecret(name)
		secrets[out.ClientCASecret] = ir.Secret{Name: out.ClientCASecret, TrustedCA: []byte(t.ClientCA.PEM)}
	}
	return out
}

func sortedSecrets(m map[string]ir.Secret) []ir.Secret {
	var out []ir.Secret
	for _, n := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[n])
	}
	return out
}

func (b *builder) instances(dc, name string) []consul.Instance {
	if b.reads != nil {
		b.reads[consul.ServiceKey{Datacenter: dc, Name: name}] = true
	}
	if svc := b.cat.Service(dc, name); svc != nil {
		return svc.Instances
	}
	return nil
}

func (b *builder) endpoints(s *policy.Service, tiers [][]consul.Instance, sub *policy.Subset) []ir.Endpoint {
	var out []ir.Endpoint
	for prio, instances := range tiers {
		for _, in := range instances {
			if sub != nil && !matchesSubset(in, sub) {
				continue
			}
			ep, warn := endpoint(in, s.OnlyPassing)
			if warn != "" {
				if sub == nil {
					b.warn("service %q instance %q on node %q: %s", s.ConsulName, in.ID, in.Node, warn)
				}
				continue
			}
			ep.Priority = uint32(prio)
			out = append(out, ep)
		}
	}
	return out
}

func matchesSubset(in consul.Instance, sub *policy.Subset) bool {
	for _, t := range sub.Tags {
		if _, ok := slices.BinarySearch(in.Tags, t); !ok {
			return false
		}
	}
	for k, v := range sub.Meta {
		if in.Meta[k] != v {
			return false
		}
	}
	return true
}

func endpoint(in consul.Instance, onlyPassing bool) (ir.Endpoint, string) {
	addr, err := netip.ParseAddr(in.Address)
	if err != nil {
		return ir.Endpoint{}, fmt.Sprintf("address %q is not an IP address; EDS endpoints must be IPs, so it is skipped", in.Address)
	}
	if addr.Zone() != "" {
		// A link-local address names an interface of the instance's host,
		// which means nothing on the proxy's.
		return ir.Endpoint{}, fmt.Sprintf("address %q is scoped to a network interface (%%%s); only the instance's host can reach it, so it is skipped", in.Address, addr.Zone())
	}
	if in.Port <= 0 || in.Port > 65535 {
		return ir.Endpoint{}, fmt.Sprintf("port %d is out of range; skipped", in.Port)
	}
	health, weight := healthAndWeight(in)
	if onlyPassing && in.Status == consul.StatusWarning {
		health = ir.Unhealthy
	}
	zone := in.NodeMeta["zone"]
	if zone == "" {
		zone = in.NodeMeta["availability_zone"]
	}
	return ir.Endpoint{
		Address:  addr.Unmap(),
		Port:     uint32(in.Port),
		Health:   health,
		Weight:   weight,
		Locality: ir.Locality{Region: in.Datacenter, Zone: zone},
	}, ""
}

// healthAndWeight maps Consul's view to Envoy's. Warning counts as healthy
// (Consul's own default for DNS and Connect) at the warning weight. A weight
// Consul set to 0 means "send nothing", which Envoy can only express as
// UNHEALTHY: its weights must be at least 1.
func healthAndWeight(in consul.Instance) (ir.Health, uint32) {
	passing, warning := in.WeightPassing, in.WeightWarning
	if passing == 0 && warning == 0 {
		// Both unset: data that never went through Consul's defaulting.
		passing, warning = 1, 1
	}
	var (
		health = ir.Healthy
		weight = passing
	)
	switch in.Status {
	case consul.StatusWarning:
		weight = warning
	case consul.StatusCritical:
		health = ir.Unhealthy
	case consul.StatusMaintenance:
		health = ir.Draining
	}
	if weight < 1 {
		if health == ir.Healthy {
			health = ir.Unhealthy
		}
		weight = 1
	}
	return health, uint32(min(weight, maxWeight))
}

// clusterName is the CDS name of a target: "svc" or "svc.subset".
func clusterName(t policy.Target) string {
	if t.Subset == "" {
		return t.Service
	}
	return t.Service + "." + t.Subset
}

func (b *builder) group(p *policy.Proxy, tags map[string][]tagroute.Route) ir.Group {
	g := ir.Group{Name: p.Name, Proxyless: p.Proxyless}
	secrets := map[string]ir.Secret{}
	for _, l := range p.Listeners {
		name := p.Name + "." + l.Name
		il := ir.Listener{
			Name:        name,
			Address:     l.Address,
			Port:        uint32(l.Port),
			Protocol:    l.Protocol,
			IdleTimeout: l.IdleTimeout,
			TCP:         weighted(l.TCP),
			TLS:         downstreamTLS(name, l.TLS, secrets),
			HTTP:        l.HTTP,
		}
		for _, vh := range l.VirtualHosts {
			ivh := ir.VirtualHost{Name: vh.Name, Domains: vh.Domains, HTTP: vh.HTTP}
			for i, r := range vh.Routes {
				ir := b.route(r)
				ir.Name = routeName(vh.Name, i)
				if ir.Fault != nil {
					il.UsesFault = true
				}
				ivh.Routes = append(ivh.Routes, ir)
			}
			il.VirtualHosts = append(il.VirtualHosts, ivh)
		}
		if l.TagRoutes != "" {
			addTagRoutes(&il, tags[name])
		}
		g.Listeners = append(g.Listeners, il)
	}
	slices.SortFunc(g.Listeners, func(a, b ir.Listener) int { return strings.Compare(a.Name, b.Name) })
	g.Secrets = sortedSecrets(secrets)
	return g
}

// routeName is a route's identity in its route configuration: virtual
// host and position, never where the policy declares it.
func routeName(virtualHost string, i int) string { return virtualHost + "/" + strconv.Itoa(i) }

func weighted(ts []policy.Target) []ir.WeightedCluster {
	var out []ir.WeightedCluster
	for _, t := range ts {
		out = append(out, ir.WeightedCluster{Name: clusterName(t), Weight: uint32(t.Weight)})
	}
	return out
}

func (b *builder) route(r *policy.Route) ir.Route {
	out := ir.Route{
		Source:          r.Source,
		Match:           r.Match,
		Clusters:        weighted(r.Targets),
		Redirect:        r.Redirect,
		DirectResponse:  r.DirectResponse,
		Timeout:         r.Timeout,
		IdleTimeout:     r.IdleTimeout,
		Retry:           r.Retry,
		Rewrite:         r.Rewrite,
		RequestHeaders:  r.RequestHeaders,
		ResponseHeaders: r.ResponseHeaders,
		Fault:           r.Fault,
		HTTP:            r.HTTP,
	}
	if r.Mirror != nil {
		out.Mirror = &ir.Mirror{Cluster: clusterName(r.Mirror.Target), Percent: r.Mirror.Percent}
	}
	// Ring hash needs the route to say what to hash; take it from the
	// first ring-hash target's settings. A route computes one hash for
	// whichever cluster it picks, so a split to two ring-hash services
	// with different hash policies uses the first one's.
	for _, t := range r.Targets {
		if s := b.pol.Service(t.Service); s != nil && s.LBPolicy == ir.LBRingHash {
			out.HashPolicies = s.HashPolicies
			break
		}
	}
	return out
}
