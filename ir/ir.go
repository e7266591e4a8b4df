// Package ir is the resolved world the bridge serves, in plain Go structs:
// clusters, their endpoints, and (per proxy group) listeners and routes. It
// imports neither Consul's API nor Envoy's protos, so a reader can see here
// what proxies will get without knowing either.
package ir

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Model is everything the bridge serves at one moment. Slices are sorted by
// name so equal worlds produce equal models.
type Model struct {
	// Clusters are every cluster the bridge serves, with its load
	// assignment. A proxy gets those its group reaches (Group.Clusters);
	// the resources are built once and shared by every group that does.
	// Pointers, never modified once in a model: a model made from the
	// last one for a change of endpoints shares every cluster it did not
	// change (model.EndpointIndex.Rebuild), where copying them all cost
	// more than the change with thousands of services.
	Clusters []*Cluster
	// Groups holds per-proxy-group resources (listeners, routes), keyed by
	// the node.cluster the proxies announce. Empty until policy declares any.
	Groups []Group
	// Proxyless holds the API listeners proxyless gRPC clients get instead
	// of a group's listeners, sorted by name: one per xDS target name
	// (xds:///NAME), each with a single virtual host matching every
	// authority. Only Name, VirtualHosts and UsesFault apply to them.
	Proxyless []Listener
	// ProxylessClusters are the clusters Proxyless reaches, sorted: what
	// a proxyless gRPC client in no proxyless group gets.
	ProxylessClusters []string
	// Secrets are the SDS secrets of upstream TLS (client certificates and
	// CAs of clusters), sorted by name. A proxy gets those of the clusters
	// it gets, and no other.
	Secrets []Secret
	// UnmatchedAll gives nodes in no group every cluster and its
	// endpoints (never a secret); otherwise they get nothing.
	UnmatchedAll bool
	// Mesh is the service mesh's settings (mesh.go); nil without one.
	Mesh *Mesh `json:",omitempty"`
	// MeshGRPCServers are the instances of proxyless gRPC servers in the
	// mesh (meshgrpc.go), sorted by listener name; proxyless gRPC nodes
	// get their inbound listeners by name.
	MeshGRPCServers []MeshGRPCServer `json:",omitempty"`
}

// Group is what the proxies of one node.cluster get on top of the shared
// clusters.
type Group struct {
	Name      string
	Listeners []Listener
	// Proxyless marks a group whose nodes are proxyless gRPC clients
	// whatever user agent they announce: they get Model.Proxyless, and the
	// group has no listeners of its own.
	Proxyless bool
	// Secrets are the SDS secrets of the group's TLS listeners, sorted by
	// name.
	Secrets []Secret
	// Clusters are the names of the clusters the group's proxies get,
	// sorted: those its listeners route, split, mirror or forward to and
	// its upstreams (every cluster with export_all_services); for a
	// proxyless group, those its API listeners reach.
	Clusters []string
	// ProxylessTargets narrows a proxyless group to these API listeners
	// (xDS target names), sorted; nil means every one in Model.Proxyless.
	ProxylessTargets []string
	// Sidecar, if set, makes this the group of one Connect sidecar (or of
	// a policy group declared sidecar_for): besides Listeners, its
	// proxies get the sidecar's public and upstream listeners
	// (Sidecar.Listeners, meshlisteners.go).
	Sidecar *Sidecar `json:",omitempty"`
	// Gateway, if set, makes this the group of one Consul gateway
	// (gateway.go): its one listener is derived from it.
	Gateway *Gateway `json:",omitempty"`
}

// LBPolicy is a cluster's load-balancing algorithm.
type LBPolicy string

// Load-balancing policies; the zero value means round robin.
const (
	LBRoundRobin   LBPolicy = "round_robin"
	LBLeastRequest LBPolicy = "least_request"
	LBRingHash     LBPolicy = "ring_hash"
	LBRandom       LBPolicy = "random"
)

// Cluster is one upstream cluster with its endpoints, delivered by EDS.
type Cluster struct {
	Name string
	// Service and Subset say where the endpoints come from, for operators.
	Service        string
	Subset         string
	ConnectTimeout time.Duration
	LBPolicy       LBPolicy
	// LBPolicies, if set, is gRFC A52's load_balancing_policy list in
	// order of preference (proxyless copies only: ProxylessClusterPrefix);
	// LBPolicy stays the legacy field for clients that do not read it.
	LBPolicies       []LBPolicy `json:",omitempty"`
	HTTP2            bool
	CircuitBreaker   *CircuitBreaker
	OutlierDetection *OutlierDetection
	HealthCheck      *HealthCheck
	TLS              *UpstreamTLS
	// ZoneAware, if set, makes proxies prefer endpoints in their own zone.
	ZoneAware *ZoneAware `json:",omitempty"`
	// OriginalDestination makes the cluster Envoy's ORIGINAL_DST: it
	// connects to where the connection was headed, has no endpoints and
	// no EDS (a transparent proxy's passthrough, tproxy.go).
	OriginalDestination bool `json:",omitempty"`
	// Aggregate makes the cluster Envoy's aggregate cluster: it sends to
	// the first of these clusters that has healthy endpoints (a mesh
	// failover, as Consul serves it: the target itself, then its failover
	// targets, each a FailoverTargetPrefix cluster of its own SNI and
	// identity). It has no endpoints, no EDS and no TLS of its own.
	Aggregate []string `json:",omitempty"`
	Endpoints []Endpoint
}

// ZoneAware is Envoy's zone aware routing for a cluster: a proxy sends
// traffic to endpoints in its own zone in proportion to how its own
// service (its bootstrap's local cluster) is spread over zones. Below
// MinClusterSize endpoints it balances over all zones.
type ZoneAware struct {
	MinClusterSize uint64
	// RoutingPercent of requests are routed zone-aware (100: all).
	RoutingPercent float64
}

// Health is an endpoint's health as the proxy should treat it.
type Health int

// Endpoint health states.
const (
	Healthy Health = iota
	Unhealthy
	Draining
)

func (h Health) String() string {
	switch h {
	case Healthy:
		return "HEALTHY"
	case Unhealthy:
		return "UNHEALTHY"
	case Draining:
		return "DRAINING"
	}
	return fmt.Sprintf("Health(%d)", int(h))
}

// Locality places an endpoint for zone-aware routing.
type Locality struct {
	Region string
	Zone   string
}

// Endpoint is one address a cluster may send traffic to.
type Endpoint struct {
	Address  netip.Addr
	Port     uint32
	Health   Health
	Weight   uint32
	Locality Locality
	// Priority 0 is preferred; higher values are failover tiers.
	Priority uint32
}

// Validation errors, joined by Validate so every problem is reported at once.
var (
	ErrClusterName    = errors.New("cluster name is empty")
	ErrDuplicate      = errors.New("duplicate name")
	ErrUnsorted       = errors.New("not sorted by name")
	ErrConnectTimeout = errors.New("connect timeout must be positive")
	ErrEndpoint       = errors.New("invalid endpoint")
	ErrListener       = errors.New("invalid listener")
	ErrUnknownCluster = errors.New("unknown cluster")
)

// Validate checks the invariants the translator relies on.
func (m *Model) Validate() error {
	var errs []error
	for i, c := range m.Clusters {
		if c.Name == "" {
			errs = append(errs, fmt.Errorf("cluster %d: %w", i, ErrClusterName))
		}
		if i > 0 {
			switch prev := m.Clusters[i-1].Name; {
			case prev == c.Name:
				errs = append(errs, fmt.Errorf("cluster %q: %w", c.Name, ErrDuplicate))
			case prev > c.Name:
				errs = append(errs, fmt.Errorf("cluster %q after %q: %w", c.Name, prev, ErrUnsorted))
			}
		}
		if c.ConnectTimeout <= 0 {
			errs = append(errs, fmt.Errorf("cluster %q: %w", c.Name, ErrConnectTimeout))
		}
		errs = append(errs, c.EndpointErrors()...)
	}
	if !slices.IsSortedFunc(m.Groups, func(a, b Group) int { return strings.Compare(a.Name, b.Name) }) {
		errs = append(errs, fmt.Errorf("groups: %w", ErrUnsorted))
	}
	clusterRefs := map[string]string{}
	for _, c := range m.Clusters {
		for _, n := range c.TLS.secretNames() {
			// A mesh cluster's secrets (the caller's leaf, the roots) are
			// never shared: the per-VM agent serves them, or in central
			// mode the caller's group does (validateMesh checks that).
			if !IsMeshSecret(n) {
				clusterRefs[n] = fmt.Sprintf("cluster %q", c.Name)
			}
		}
	}
	errs = append(errs, validateSecrets("shared", m.Secrets, clusterRefs, nil)...)
	for _, g := range m.Groups {
		if g.Proxyless && len(g.Listeners) > 0 {
			errs = append(errs, fmt.Errorf("group %q is proxyless but has listeners: %w", g.Name, ErrListener))
		}
		refs := map[string]string{}
		for _, l := range g.Listeners {
			for _, n := range l.TLS.secretNames() {
				refs[n] = fmt.Sprintf("listener %q", l.Name)
			}
			if l.TLS != nil && l.TLS.DefaultCertificate == "" {
				errs = append(errs, fmt.Errorf("listener %q: TLS without a default certificate: %w", l.Name, ErrListener))
			}
		}
		// A group's proxies get its secrets and the shared ones, in one
		// SDS namespace.
		errs = append(errs, validateSecrets(fmt.Sprintf("group %q", g.Name), g.Secrets, refs, m.Secrets)...)
		for _, s := range g.Secrets {
			if _, shared := slices.BinarySearchFunc(m.Secrets, s.Name, func(a Secret, n string) int { return strings.Compare(a.Name, n) }); shared {
				errs = append(errs, fmt.Errorf("group %q secret %q is also a shared secret: %w", g.Name, s.Name, ErrDuplicate))
			}
		}
	}
	errs = append(errs, m.validateMesh()...)
	errs = append(errs, m.validateGateways()...)
	errs = append(errs, m.validateReach()...)
	errs = append(errs, m.validateMeshGRPC()...)
	for i, l := range m.Proxyless {
		if l.Name == "" {
			errs = append(errs, fmt.Errorf("proxyless listener %d: name is empty: %w", i, ErrListener))
		}
		if i > 0 {
			switch prev := m.Proxyless[i-1].Name; {
			case prev == l.Name:
				errs = append(errs, fmt.Errorf("proxyless listener %q: %w", l.Name, ErrDuplicate))
			case prev > l.Name:
				errs = append(errs, fmt.Errorf("proxyless listener %q after %q: %w", l.Name, prev, ErrUnsorted))
			}
		}
		if len(l.VirtualHosts) != 1 || len(l.VirtualHosts[0].Routes) == 0 {
			errs = append(errs, fmt.Errorf("proxyless listener %q needs one virtual host with routes: %w", l.Name, ErrListener))
		}
	}
	return errors.Join(errs...)
}

// EndpointErrors are the problems Model.Validate finds in c's endpoints:
// all it checks that an endpoint-only change can change, so a translator
// that is told only endpoints changed checks those clusters' alone.
func (c *Cluster) EndpointErrors() []error {
	var errs []error
	for _, e := range c.Endpoints {
		if !e.Address.IsValid() || e.Port == 0 || e.Port > 65535 || e.Weight == 0 {
			errs = append(errs, fmt.Errorf("cluster %q endpoint %s:%d weight %d: %w", c.Name, e.Address, e.Port, e.Weight, ErrEndpoint))
		}
	}
	return errs
}

// Cluster returns the named cluster, or nil.
func (m *Model) Cluster(name string) *Cluster {
	i, ok := slices.BinarySearchFunc(m.Clusters, name, func(c *Cluster, n string) int { return strings.Compare(c.Name, n) })
	if !ok {
		return nil
	}
	return m.Clusters[i]
}

// Equal reports whether c and o are the same cluster, endpoints included
// (what the translator's memo needs to reuse c's resources for o).
func (c *Cluster) Equal(o *Cluster) bool {
	return c.SettingsEqual(o) && slices.Equal(c.Endpoints, o.Endpoints)
}

// SettingsEqual is Equal without the endpoints: whether c and o make the
// same Envoy Cluster.
func (c *Cluster) SettingsEqual(o *Cluster) bool {
	return c.Name == o.Name && c.Service == o.Service && c.Subset == o.Subset &&
		c.ConnectTimeout == o.ConnectTimeout && c.LBPolicy == o.LBPolicy && slices.Equal(c.LBPolicies, o.LBPolicies) && c.HTTP2 == o.HTTP2 &&
		ptrEqual(c.CircuitBreaker, o.CircuitBreaker) && ptrEqual(c.OutlierDetection, o.OutlierDetection) &&
		ptrEqual(c.HealthCheck, o.HealthCheck) && c.TLS.Equal(o.TLS) && ptrEqual(c.ZoneAware, o.ZoneAware) &&
		c.OriginalDestination == o.OriginalDestination && slices.Equal(c.Aggregate, o.Aggregate)
}

func ptrEqual[T comparable](a, b *T) bool { return a == b || (a != nil && b != nil && *a == *b) }

// Equal reports whether t and o originate the same TLS (nil equals nil).
func (t *UpstreamTLS) Equal(o *UpstreamTLS) bool {
	if t == nil || o == nil {
		return t == o
	}
	return t.SNI == o.SNI && t.CertificateSecret == o.CertificateSecret && t.CASecret == o.CASecret &&
		t.CertificateProvider == o.CertificateProvider && slices.Equal(t.MatchURISANs, o.MatchURISANs) &&
		ptrEqual(t.Files, o.Files)
}
