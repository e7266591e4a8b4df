package model

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Consul's gateways, as Consul's own xDS server serves them: each
// registered instance is a group keyed by its service id (like a sidecar),
// whose one listener has a filter chain per service, matched by that
// service's mesh SNI.
//
// A terminating gateway (agent/xds/listeners.go
// makeTerminatingGatewayListener in Consul 1.15) terminates the mesh's
// mutual TLS with each linked service's leaf, enforces that service's
// intentions, and forwards to the service's instances (external: no
// sidecar) over TLS made from its config entry's CAFile/CertFile/KeyFile
// and SNI when CAFile is given.

// gateways adds the gateway groups and their clusters to the model; run
// after finish, so a gateway cluster never takes a sidecar's name.
func (mb *meshBuilder) gateways() {
	m := mb.m
	taken := map[string]bool{}
	for _, c := range m.Clusters {
		taken[c.Name] = true
	}
	// The gateway services linking each service: with two, each gets its
	// own cluster (their entries' TLS files may differ).
	linkers := map[string]map[string]bool{}
	for _, p := range mb.mesh.Proxies {
		if p.Kind != consul.KindTerminatingGateway {
			continue
		}
		for _, s := range mb.mesh.TerminatingGateways[p.Name] {
			if linkers[s.Name] == nil {
				linkers[s.Name] = map[string]bool{}
			}
			linkers[s.Name][p.Name] = true
		}
	}
	clusters := map[string]ir.Cluster{}
	var groups []ir.Group
	for _, p := range mb.mesh.Proxies {
		if p.Kind != consul.KindTerminatingGateway {
			continue
		}
		if g, ok := mb.terminating(p, taken, linkers, clusters); ok {
			groups = append(groups, g)
		}
	}
	for n := range clusters {
		taken[n] = true
	}
	for _, p := range mb.mesh.Proxies {
		if p.Kind != consul.KindMeshGateway {
			continue
		}
		if g, ok := mb.meshGateway(p, taken, clusters); ok { // meshgateway.go
			groups = append(groups, g)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(clusters)) {
		c := clusters[n]
		m.Clusters = append(m.Clusters, &c)
	}
	slices.SortFunc(m.Clusters, func(a, b *ir.Cluster) int { return strings.Compare(a.Name, b.Name) })
	m.Groups = append(m.Groups, groups...)
	slices.SortFunc(m.Groups, func(a, b ir.Group) int { return strings.Compare(a.Name, b.Name) })
}

// terminating is the group of one terminating gateway instance.
func (mb *meshBuilder) terminating(p consul.Proxy, taken map[string]bool, linkers map[string]map[string]bool, clusters map[string]ir.Cluster) (ir.Group, bool) {
	b := mb.b
	who := fmt.Sprintf("terminating gateway %q on node %q", p.ID, p.Node)
	if p.Port <= 0 || p.Port > 65535 {
		b.warn("%s: port %d is out of range; skipped", who, p.Port)
		return ir.Group{}, false
	}
	name := ir.SidecarGroupName(p.Node, p.ID)
	gw := &ir.Gateway{
		Kind: ir.GatewayTerminating, ProxyID: p.ID, Node: p.Node, Service: p.Name, Datacenter: p.Datacenter,
		Address: cmp.Or(p.ServiceAddress, "0.0.0.0"), Port: uint32(p.Port),
	}
	g := ir.Group{Name: name, Gateway: gw, Clusters: []string{}}
	linked := mb.mesh.TerminatingGateways[p.Name]
	if len(linked) == 0 {
		b.warn("%s: no terminating-gateway config entry links a service to %q; its listener has no chain", who, p.Name)
	}
	for _, s := range linked {
		if s.Name == "*" {
			b.warn("%s: the wildcard link (every service) is not expanded (yet): Consul's expansion, /v1/catalog/gateway-services/%s, has not been read, so only the services linked by name are served", who, p.Name)
			continue
		}
		if !ir.QueryableServiceName(s.Name) {
			b.warn("%s: linked service %q is not a service name; skipped", who, s.Name)
			continue
		}
		if mb.m.Mesh.Central {
			if l, ok := mb.mesh.Leaves[s.Name]; !ok || l.CertPEM == "" || len(l.KeyPEM) == 0 {
				// As for a sidecar: no chain rather than one waiting for a
				// certificate that may never come.
				b.warn("%s: no leaf certificate of %q read from Consul (central mode needs a token allowed to sign for it, service:write); its chain is not served until there is", who, s.Name)
				continue
			}
		}
		sni := ir.MeshClusterName(s.Name, p.Datacenter, mb.mesh.TrustDomain)
		cname := sni
		if taken[sni] || len(linkers[s.Name]) > 1 {
			// A sidecar's cluster of the same service (its endpoints are
			// this gateway) or another gateway's link: Consul's name,
			// qualified by the gateway service (the SNI stays Consul's).
			cname = sni + "/" + p.Name
		}
		protocol := mb.protocol(who, "", s.Name)
		if _, ok := clusters[cname]; !ok {
			clusters[cname] = mb.linkedCluster(cname, s, p.Datacenter, protocol)
		}
		in, err := mb.intentions.resolve(s.Name)
		if err != nil {
			// Fewer checks than asked would let callers in.
			b.warn("%s: intentions of %q cannot be enforced (%v); every caller is denied until fixed", who, s.Name, err)
			in = ir.Intentions{Default: ir.IntentionDeny}
		}
		gw.Chains = append(gw.Chains, ir.GatewayChain{
			SNI: sni, Service: s.Name, Cluster: cname, Protocol: protocol, Intentions: in,
			CertificateSecret: ir.LeafSecretPrefix + s.Name,
		})
		g.Clusters = append(g.Clusters, cname)
		if mb.m.Mesh.Central {
			leaf := mb.mesh.Leaves[s.Name]
			g.Secrets = append(g.Secrets, ir.Secret{Name: ir.LeafSecretPrefix + s.Name, CertificateChain: []byte(leaf.CertPEM), PrivateKey: leaf.KeyPEM})
		}
	}
	slices.SortFunc(gw.Chains, func(a, b ir.GatewayChain) int { return strings.Compare(a.SNI, b.SNI) })
	slices.Sort(g.Clusters)
	g.Clusters = slices.Compact(g.Clusters)
	if mb.m.Mesh.Central && len(g.Secrets) > 0 {
		g.Secrets = append(g.Secrets, ir.Secret{Name: ir.RootsSecretName, TrustedCA: []byte(mb.mesh.RootsPEM)})
		slices.SortFunc(g.Secrets, func(a, b ir.Secret) int { return strings.Compare(a.Name, b.Name) })
	}
	return g, true
}

// linkedCluster is a terminating gateway's cluster of a linked service:
// the service's own instances in the gateway's datacenter (they have no
// sidecar), with TLS from the entry's files when it names a CA (as
// Consul: no CAFile, no TLS).
func (mb *meshBuilder) linkedCluster(name string, s consul.LinkedService, dc, protocol string) ir.Cluster {
	b := mb.b
	set := meshServiceSettings(b.pol, s.Name)
	c := ir.Cluster{
		Name: name, Service: s.Name, ConnectTimeout: set.ConnectTimeout, LBPolicy: set.LBPolicy,
		HTTP2:          protocol == "http2" || protocol == "grpc",
		CircuitBreaker: set.CircuitBreaker, OutlierDetection: set.OutlierDetection,
	}
	if s.CAFile != "" {
		c.TLS = &ir.UpstreamTLS{SNI: s.SNI, Files: &ir.TLSFiles{CA: s.CAFile}}
		if s.CertFile != "" && s.KeyFile != "" {
			c.TLS.Files.Cert, c.TLS.Files.Key = s.CertFile, s.KeyFile
		}
	}
	svc := b.cat.Service("", s.Name)
	if svc == nil || len(svc.Instances) == 0 {
		b.warn("terminating gateway cluster %q: service %q has no instances in the catalog (yet)", name, s.Name)
		return c
	}
	for _, in := range svc.Instances {
		if in.Datacenter != "" && in.Datacenter != dc {
			continue
		}
		ep, warn := endpoint(in, set.OnlyPassing)
		if warn != "" {
			b.warn("instance %q of %q on node %q: %s", in.ID, s.Name, in.Node, warn)
			continue
		}
		c.Endpoints = append(c.Endpoints, ep)
	}
	return c
}
