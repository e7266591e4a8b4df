package policy

import (
	"github.com/hashicorp/hcl/v2"
	"path"
	"time"

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
	// Services sorted by name.
	Services []*Service
	// Proxies in declaration order: for a node.cluster that no proxy names
	// exactly, the first matching glob pattern wins.
	Proxies []*Proxy
	// GRPCServices are the routes of proxyless gRPC clients, by xDS target
	// name, sorted by name. A cluster without one gets a default: every
	// call to xds:///NAME goes to cluster NAME.
	GRPCServices []*GRPCService
}

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
	HealthCheck      *ir.HealthCheck
	TLS              *ir.UpstreamTLS
	// FailoverDatacenters are tried in order when the service has no
	// healthy instance in its own datacenter.
	FailoverDatacenters []string
	Source              string
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
	Source    string
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
	Source       string
	Range        hcl.Range
}

// VirtualHost is a `virtual_host` block.
type VirtualHost struct {
	Name    string
	Domains []string
	Routes  []*Route
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
