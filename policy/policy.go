package policy

import (
	"path"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Policy is the validated routing policy: how Consul services become
// clusters and what listeners and routes each proxy group gets. It reuses
// ir's plain value types for route details so the two never drift apart.
type Policy struct {
	// ExportAllServices makes every local catalog service a cluster, not
	// only those the policy names. It defaults to true for a configuration
	// without service, proxy or grpc_service blocks (a pure catalog mirror;
	// proxy blocks that only set proxyless = true do not count) and to
	// false otherwise.
	ExportAllServices bool
	// UnmatchedNodes is what nodes in no proxy group get: UnmatchedNone
	// (nothing) or UnmatchedAll (every cluster and its endpoints, never a
	// secret). It defaults to all for a policy without proxy blocks (pure
	// discovery) and to none as soon as it declares one.
	UnmatchedNodes string
	// Services sorted by name.
	Services []*Service
	// Proxies in declaration order: for a node.cluster that no proxy names
	// exactly, the first matching glob pattern wins.
	Proxies []*Proxy
	// GRPCServices are the routes of proxyless gRPC clients, by xDS target
	// name, sorted by name. A cluster without one gets a default: every
	// call to xds:///NAME goes to cluster NAME.
	GRPCServices []*GRPCService
	// Mesh is the mesh block (mesh.go); nil without one.
	Mesh *Mesh
	// MeshRoutes are the routes mesh callers of a service take, by
	// service, sorted by service (meshroutes.go).
	MeshRoutes []*MeshRoutes
	// Chains are Consul's discovery chains by service (chain blocks, from
	// config entries), which proxy listener routes to the service follow.
	Chains []*Chain
}

// What nodes in no proxy group get (Policy.UnmatchedNodes).
const (
	UnmatchedNone = "none"
	UnmatchedAll  = "all"
)

// Defaults the routing policy falls back to.
const (
	DefaultConnectTimeout = 5 * time.Second
	DefaultListenAddress  = "0.0.0.0"
)

// Service is the `service "NAME"` block: cluster settings for one Consul
// service. Name is the cluster name; ConsulName the service in Consul.
type Service struct {
	Name             string
	ConsulName       string
	Datacenter       string
	ConnectTimeout   time.Duration
	LBPolicy         ir.LBPolicy
	HashPolicies     []ir.HashPolicy
	OnlyPassing      bool
	HTTP2            bool
	Subsets          []Subset
	CircuitBreaker   *ir.CircuitBreaker
	OutlierDetection *ir.OutlierDetection
	ZoneAware        *ir.ZoneAware
	HealthCheck      *ir.HealthCheck
	TLS              *UpstreamTLS
	// FailoverDatacenters are tried in order when the service has no
	// healthy instance in its own datacenter.
	FailoverDatacenters []string
	// Failover is where the mesh sends a target's traffic when none of
	// its sidecars is healthy, as Consul's service-resolver failover, by
	// the subset it applies to ("" is every other subset: Consul's "*"):
	// the targets in order, each its own cluster under an aggregate one,
	// as Consul serves them. A "*" failover to the service's own sidecars
	// in other datacenters only is FailoverDatacenters instead.
	Failover map[string][]FailoverTarget
	Source   string
}

// FailoverTarget is one place a failover sends traffic: a service (""
// is the failing one), its subset ("" is all of it) and datacenter (""
// is the failing target's).
type FailoverTarget struct {
	Service, Subset, Datacenter string
}

// Subset selects instances of a service by tags and metadata; it becomes
// cluster "<service>.<subset>".
type Subset struct {
	Name string
	Tags []string
	Meta map[string]string
}

// Proxy is the `proxy "GROUP"` block: what proxies whose node.cluster is
// GROUP (or matches it as a glob pattern) get.
type Proxy struct {
	Name      string
	Listeners []*Listener
	// Proxyless marks the group's nodes as proxyless gRPC clients whatever
	// user agent they announce: they get the API listeners of
	// GRPCServices, and the group declares no listeners.
	Proxyless bool
	// Upstreams are the services (cluster names) the group's proxies
	// dial without a route, e.g. through a static listener of their own;
	// they get these clusters beside those their routes reach. For a
	// proxyless group they are the xDS target names its clients dial,
	// narrowing what they get; empty means every target.
	Upstreams []string
	// ExportAllServices gives the group every cluster the bridge serves,
	// not only those its listeners and upstreams reach (an edge that
	// fronts everything).
	ExportAllServices bool
	Source            string
	// LocalService is the service the group's proxies belong to (zone
	// aware routing: their bootstrap's local cluster); it is among
	// Upstreams.
	LocalService string
	// SidecarFor, if set, makes the group's proxies this service's Connect
	// sidecar: they get the listeners and upstreams of its first
	// registered sidecar (by node and proxy id), and declare none.
	SidecarFor string
}

// GRPCService is the `grpc_service "NAME"` block: how proxyless gRPC
// clients that dial xds:///NAME route their calls. Name is the LDS and RDS
// resource name. Routes use the route block of proxy listeners, limited to
// what gRPC's xDS client supports.
type GRPCService struct {
	Name   string
	Routes []*Route
	Source string
}

// Listener is a `listener` block.
type Listener struct {
	Name         string
	Address      string
	Port         int
	Protocol     string
	IdleTimeout  time.Duration
	TCP          []Target
	VirtualHosts []*VirtualHost
	// TLS, if set, terminates TLS on the listener.
	TLS *ListenerTLS
	// TagRoutes, if set ("fabio" or "traefik"), adds the routes catalog
	// services declare in their tags after the listener's own.
	TagRoutes string
	// TagRouteOwners maps a host ("*" for host-less routes, "/PATH" for
	// host-less routes of that path) to the services whose tags may route
	// it (tagroute.Owners.Allowed).
	TagRouteOwners map[string][]string
	// HTTP is the listener's HTTP features (upgrades, compression, ...).
	HTTP ir.ListenerHTTP
	// JWKSFiles are the local key sets of HTTP.JWTProviders, which
	// ReadFiles reads into them.
	JWKSFiles []*JWKSFile
	Source    string
	Range     hcl.Range
}

// JWKSFile is a JWT provider's local key set, a file on the bridge's host
// sent to Envoy inline.
type JWKSFile struct {
	// Provider is the index of the provider in the listener's
	// HTTP.JWTProviders.
	Provider int
	Path     string
	Range    hcl.Range
}

// VirtualHost is a `virtual_host` block.
type VirtualHost struct {
	Name    string
	Domains []string
	Routes  []*Route
	// Certificate names the listener certificate that clients asking for
	// Domains get (tls { certificate = "..." }); "" for the default.
	Certificate string
	// HTTP is the virtual host's HTTP filter settings (cors, ...).
	HTTP ir.PerRoute
}

// Target names a service (and optionally one of its subsets) with a weight.
type Target struct {
	Service string
	Subset  string
	Weight  int
}

// Route is a `route` block: ir's route details with service targets still
// unresolved to clusters.
type Route struct {
	Source          string
	Range           hcl.Range
	Match           ir.RouteMatch
	Targets         []Target
	Redirect        *ir.Redirect
	DirectResponse  *ir.DirectResponse
	Timeout         time.Duration
	IdleTimeout     time.Duration
	Retry           *ir.Retry
	Rewrite         *ir.Rewrite
	RequestHeaders  ir.HeaderMutation
	ResponseHeaders ir.HeaderMutation
	Mirror          *MirrorTarget
	Fault           *ir.Fault
	// HTTP is the route's HTTP filter settings (cors, upgrades, ...),
	// with what it leaves out inherited from its virtual host.
	HTTP ir.PerRoute
}

// MirrorTarget is a `mirror` block.
type MirrorTarget struct {
	Target
	Percent float64
}

// Service returns the named service block, or nil.
func (p *Policy) Service(name string) *Service {
	if p == nil {
		return nil
	}
	for _, s := range p.Services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// GRPCService returns the grpc_service block for an xDS target name, or nil.
func (p *Policy) GRPCService(name string) *GRPCService {
	if p == nil {
		return nil
	}
	for _, g := range p.GRPCServices {
		if g.Name == name {
			return g
		}
	}
	return nil
}

// ProxyFor returns the proxy group for a node.cluster: an exact name first,
// else the first glob pattern that matches, else nil.
func (p *Policy) ProxyFor(nodeCluster string) *Proxy {
	if p == nil {
		return nil
	}
	for _, pr := range p.Proxies {
		if pr.Name == nodeCluster {
			return pr
		}
	}
	for _, pr := range p.Proxies {
		if ok, _ := path.Match(pr.Name, nodeCluster); ok {
			return pr
		}
	}
	return nil
}

// SubsetNamed returns the named subset of s, or nil.
func (s *Service) SubsetNamed(name string) *Subset {
	for i := range s.Subsets {
		if s.Subsets[i].Name == name {
			return &s.Subsets[i]
		}
	}
	return nil
}

// ListenerTLS is a listener's `tls` block.
type ListenerTLS struct {
	// Certificates in declaration order.
	Certificates []*Certificate
	// Default names the certificate of clients whose server name (SNI)
	// selects no other one: default_certificate, else the first.
	Default string
	// SNI lists, per certificate other virtual hosts than the default
	// ones select, the server names that select it (virtual host
	// domains without ports, lower case, sorted); sorted by certificate.
	// Empty when every client gets Default. The default certificate
	// appears here too when others do, with the domains of the virtual
	// hosts that use it, so that a wildcard of another certificate does
	// not capture them.
	SNI []SNICertificate
	// MinVersion and MaxVersion are "1.0" to "1.3", "" for Envoy's
	// default.
	MinVersion, MaxVersion string
	// ALPN is offered to clients in order; http listeners default to
	// ["h2", "http/1.1"].
	ALPN []string
	// ClientCA, if set, requires client certificates signed by it.
	ClientCA *PEMFile
	Range    hcl.Range
}

// SNICertificate is a certificate and the server names that select it.
type SNICertificate struct {
	Certificate string
	ServerNames []string
}

// Certificate is a `certificate "NAME"` block: a certificate chain and
// its private key.
type Certificate struct {
	Name  string
	Cert  *PEMFile
	Key   *PEMFile
	Range hcl.Range
}

// Certificate returns the named certificate, or nil.
func (t *ListenerTLS) Certificate(name string) *Certificate {
	for _, c := range t.Certificates {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// UpstreamTLS is a service's `tls` block: TLS from Envoy to the
// service's instances.
type UpstreamTLS struct {
	SNI string
	// CA verifies the upstream's certificate; nil skips verification.
	CA *PEMFile
	// Cert and Key are the client certificate (both or neither).
	Cert, Key *PEMFile
}

// PEMFile is a file of PEM data the policy names. The bridge reads it
// (ReadFiles) and serves its contents over SDS; Envoy never sees the path.
type PEMFile struct {
	// Path is where the file is: a relative path in a policy file is
	// resolved against that file's directory.
	Path string
	// Range is where the path is written.
	Range hcl.Range
	// Kind is what the file must hold: a certificate chain, a private key
	// or CA certificates.
	Kind PEMKind
	// PEM is the file's contents, set by ReadFiles; nil before.
	PEM ir.Redacted
}

// PEMKind is what a PEMFile holds.
type PEMKind int

// Kinds of PEM file.
const (
	PEMCertificate PEMKind = iota
	PEMPrivateKey
	PEMCA
)

// Files lists every PEM file the policy names, in a stable order
// (services by name, then proxies in order), each file once per place it
// is named.
func (p *Policy) Files() []*PEMFile {
	if p == nil {
		return nil
	}
	var out []*PEMFile
	add := func(fs ...*PEMFile) {
		for _, f := range fs {
			if f != nil {
				out = append(out, f)
			}
		}
	}
	for _, s := range p.Services {
		if t := s.TLS; t != nil {
			add(t.Cert, t.Key, t.CA)
		}
	}
	for _, pr := range p.Proxies {
		for _, l := range pr.Listeners {
			if t := l.TLS; t != nil {
				for _, c := range t.Certificates {
					add(c.Cert, c.Key)
				}
				add(t.ClientCA)
			}
		}
	}
	return out
}
