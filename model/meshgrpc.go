package model

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// MeshGRPC is what the proxyless gRPC mesh is built from: the Connect
// CA's trust domain, the local datacenter and the Connect-native gRPC
// services (ir/meshgrpc.go). The caller reads them from Consul: a
// native service's instances are what /v1/health/connect/SERVICE lists
// without a proxy kind, and its intentions are resolved as for a sidecar.
type MeshGRPC struct {
	TrustDomain string
	Datacenter  string
	// Services are sorted by name.
	Services []MeshGRPCService
}

// MeshGRPCService is one Connect-native gRPC service.
type MeshGRPCService struct {
	Name string
	// Instances are its registered instances; each gets its inbound
	// listener (whatever its health: a server must be configured before
	// its checks pass), and the healthy ones are its mesh cluster's
	// endpoints as their health says.
	Instances  []ir.Endpoint
	Intentions ir.Intentions
}

// meshGRPCConnectTimeout is the mesh gRPC clusters' connect timeout, as
// the bridge's default for service clusters.
const meshGRPCConnectTimeout = 5 * time.Second

// AddMeshGRPC adds the proxyless gRPC mesh to a built model: each native
// service's server listeners (Model.MeshGRPCServers), its mesh gRPC
// cluster (mutual TLS with the bootstrap's certificate provider,
// verifying the service's SPIFFE id), and xds:///SERVICE sending calls to
// that cluster instead of the plain one: the API listener of the service
// (a grpc_service block's or the default one) is retargeted, or made when
// there is none. Reach is recomputed for proxyless clients and groups.
// It is pure and returns warnings.
func AddMeshGRPC(m *ir.Model, in MeshGRPC) []string {
	if len(in.Services) == 0 {
		return nil
	}
	var warnings []string
	if m.Mesh == nil {
		m.Mesh = &ir.Mesh{}
	}
	if m.Mesh.TrustDomain == "" {
		m.Mesh.TrustDomain = in.TrustDomain
	}
	td := m.Mesh.TrustDomain
	mesh := map[string]string{} // service cluster -> mesh gRPC cluster
	for _, svc := range in.Services {
		name := ir.MeshGRPCClusterName(svc.Name, in.Datacenter, td)
		mesh[svc.Name] = name
		c := ir.Cluster{
			Name: name, Service: svc.Name, ConnectTimeout: meshGRPCConnectTimeout, LBPolicy: ir.LBRoundRobin, HTTP2: true,
			TLS: &ir.UpstreamTLS{
				SNI:                 ir.MeshClusterName(svc.Name, in.Datacenter, td),
				CertificateProvider: ir.MeshGRPCCertProvider,
				MatchURISANs:        []string{ir.SPIFFEID(td, in.Datacenter, svc.Name)},
			},
		}
		for _, e := range svc.Instances {
			if e.Weight == 0 {
				e.Weight = 1
			}
			c.Endpoints = append(c.Endpoints, e)
			m.MeshGRPCServers = append(m.MeshGRPCServers, ir.MeshGRPCServer{
				Service: svc.Name, Datacenter: in.Datacenter, Address: e.Address, Port: e.Port, Intentions: svc.Intentions,
			})
		}
		if i, found := slices.BinarySearchFunc(m.Clusters, name, func(c *ir.Cluster, n string) int { return strings.Compare(c.Name, n) }); found {
			m.Clusters[i] = &c
		} else {
			m.Clusters = slices.Insert(m.Clusters, i, &c)
		}
		if !slices.ContainsFunc(m.Proxyless, func(l ir.Listener) bool { return l.Name == svc.Name }) {
			m.Proxyless = append(m.Proxyless, ir.Listener{Name: svc.Name, VirtualHosts: []ir.VirtualHost{{
				Name: svc.Name, Domains: []string{"*"},
				Routes: []ir.Route{{
					Name: routeName(svc.Name, 0), Source: defaultGRPCRoute,
					Match:    ir.RouteMatch{PathPrefix: "/", CaseSensitive: true},
					Clusters: []ir.WeightedCluster{{Name: svc.Name, Weight: 1}},
				}},
			}}})
		}
	}
	slices.SortFunc(m.Proxyless, func(a, b ir.Listener) int { return strings.Compare(a.Name, b.Name) })
	// Calls to a native service go through the mesh whichever xDS
	// target names it; its subsets have no mesh cluster yet.
	for i := range m.Proxyless {
		// Copies all the way down: what Build returned may share its
		// slices with whatever else holds them.
		m.Proxyless[i].VirtualHosts = slices.Clone(m.Proxyless[i].VirtualHosts)
		for j := range m.Proxyless[i].VirtualHosts {
			vh := &m.Proxyless[i].VirtualHosts[j]
			vh.Routes = slices.Clone(vh.Routes)
			for k := range vh.Routes {
				r := &vh.Routes[k]
				r.Clusters = slices.Clone(r.Clusters)
				for w := range r.Clusters {
					if to, ok := mesh[r.Clusters[w].Name]; ok {
						r.Clusters[w].Name = to
					} else if c := m.Cluster(r.Clusters[w].Name); c != nil && mesh[c.Service] != "" {
						warnings = append(warnings, "xds:///"+m.Proxyless[i].Name+" route "+r.Name+": subset cluster "+c.Name+" of mesh gRPC service "+c.Service+" is not in the mesh (no mutual TLS, no intentions)")
					}
				}
			}
		}
	}
	slices.SortFunc(m.MeshGRPCServers, func(a, b ir.MeshGRPCServer) int { return strings.Compare(a.ListenerName(), b.ListenerName()) })
	m.MeshGRPCServers = slices.CompactFunc(m.MeshGRPCServers, func(a, b ir.MeshGRPCServer) bool { return a.ListenerName() == b.ListenerName() })
	m.ProxylessClusters = reached(m, m.Proxyless, nil)
	for i := range m.Groups {
		if g := &m.Groups[i]; g.Proxyless {
			g.Clusters = reached(m, m.ProxylessFor(g), nil)
		}
	}
	return warnings
}

// MeshGRPCFromCatalog is the mesh input for the Connect-native gRPC
// services natives, from what the daemon already reads: their instances
// (the catalog's watched services, local datacenter) and the mesh's
// trust domain and service-intentions (cat.Mesh), resolved with def for
// callers no intention names (the mesh's default_intention, or Consul's
// ACL default as consul.Mesh.DefaultIntention has it). A native service
// the catalog does not hold yet is skipped with a warning. Which services
// are native is the caller's to say (Consul's registrations say it:
// connect { native = true }). datacenter "" is the one the instances'
// health entries name (the local one: the catalog holds the local
// datacenter's services under "").
func MeshGRPCFromCatalog(cat *consul.Catalog, datacenter string, natives []string, def ir.IntentionAction) (MeshGRPC, []string) {
	var warnings []string
	if cat == nil || cat.Mesh == nil || cat.Mesh.TrustDomain == "" {
		if len(natives) > 0 {
			warnings = append(warnings, "no Connect CA roots read from Consul yet; the proxyless gRPC mesh is not served")
		}
		return MeshGRPC{}, warnings
	}
	out := MeshGRPC{TrustDomain: cat.Mesh.TrustDomain, Datacenter: datacenter}
	intentions := newIntentionResolver(cat.Mesh.Intentions, def)
	for _, name := range slices.Sorted(slices.Values(natives)) {
		svc := cat.Service("", name)
		if svc == nil {
			warnings = append(warnings, fmt.Sprintf("Connect-native service %q is not in the catalog (not watched?); its gRPC servers get no listener", name))
			continue
		}
		its, err := intentions.resolve(name)
		if err != nil {
			// Fail closed: denying every caller enforces no less than
			// asked, and keeps the servers' listeners (without one a
			// grpc-go xDS server stops serving altogether).
			warnings = append(warnings, fmt.Sprintf("intentions of %q: %v; its gRPC servers deny every caller until they are fixed", name, err))
			its = ir.Intentions{Default: ir.IntentionDeny}
		}
		ms := MeshGRPCService{Name: name, Intentions: its}
		for _, in := range svc.Instances {
			if out.Datacenter == "" {
				out.Datacenter = in.Datacenter
			}
			e, warn := endpoint(in, false)
			if warn != "" {
				warnings = append(warnings, fmt.Sprintf("Connect-native service %q instance %s: %s", name, in.ID, warn))
				continue
			}
			ms.Instances = append(ms.Instances, e)
		}
		out.Services = append(out.Services, ms)
	}
	if out.Datacenter == "" {
		// No instance to name it: nothing to serve either.
		return MeshGRPC{}, warnings
	}
	return out, warnings
}

// BuildMeshGRPC adds the Connect-native services' gRPC servers
// (cat.Mesh.Natives) and mesh gRPC clusters to m, after Build: with the
// default intention the sidecars get (the policy's mesh
// default_intention, else Consul's ACL default, else allow). datacenter
// "" takes the one the instances' health entries name. The daemon and
// plan both call it, so a plan shows what the daemon serves.
func BuildMeshGRPC(m *ir.Model, cat *consul.Catalog, pol *policy.Policy, datacenter string) []string {
	if cat == nil || cat.Mesh == nil || len(cat.Mesh.Natives) == 0 {
		return nil
	}
	def := cat.Mesh.DefaultIntention
	if pm := pol.Mesh; pm != nil && pm.DefaultIntention != "" {
		def = pm.DefaultIntention
	}
	if def == "" {
		def = ir.IntentionAllow
	}
	in, warnings := MeshGRPCFromCatalog(cat, datacenter, cat.Mesh.Natives, def)
	return append(warnings, AddMeshGRPC(m, in)...)
}
