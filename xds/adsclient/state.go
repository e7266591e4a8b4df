package adsclient

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// State is what the client holds at one point in time. States are shared
// between Snapshot callers and Updates, so neither the maps nor the
// resources may be modified.
type State struct {
	// Types maps a type URL to what the client holds for it; a type is
	// absent until its first response is accepted.
	Types map[string]TypeState
}

// TypeState is the client's view of one resource type.
type TypeState struct {
	// Version is the last accepted (ACKed) version_info, or
	// system_version_info in Delta mode.
	Version string
	// Nonce is the nonce of the last accepted response.
	Nonce string
	// Resources maps resource name to its decoded proto.
	Resources map[string]proto.Message
	// ResourceVersions maps resource name to its Delta version; nil in SotW.
	ResourceVersions map[string]string
	// Encoded maps resource name to the Any it arrived in (the server's
	// encoding, of which Resources holds the decoded and checked copy):
	// a relay serves those bytes again instead of encoding each resource
	// anew.
	Encoded map[string]*anypb.Any
}

// Endpoint is one endpoint of a ClusterLoadAssignment, flattened for
// assertions.
type Endpoint struct {
	// Address is "host:port" for socket addresses, the path for pipes and
	// "internal:NAME" for Envoy internal addresses.
	Address string
	// Health is the core.v3.HealthStatus name, e.g. "HEALTHY" or "UNKNOWN".
	Health string
	// Weight is load_balancing_weight, 0 when unset.
	Weight uint32
	// Priority is the priority of the locality the endpoint is in.
	Priority uint32
}

// Version returns the accepted version of a type, "" if none yet.
func (s State) Version(typeURL string) string { return s.Types[typeURL].Version }

// Names returns the sorted resource names held for a type.
func (s State) Names(typeURL string) []string { return sortedKeys(s.Types[typeURL].Resources) }

// ClusterNames returns the sorted names of the clusters held.
func (s State) ClusterNames() []string { return s.Names(ClusterType) }

// ListenerNames returns the sorted names of the listeners held.
func (s State) ListenerNames() []string { return s.Names(ListenerType) }

// RouteConfigNames returns the sorted names of the route configurations held.
func (s State) RouteConfigNames() []string { return s.Names(RouteType) }

// LoadAssignmentNames returns the sorted names of the ClusterLoadAssignments held.
func (s State) LoadAssignmentNames() []string { return s.Names(EndpointType) }

// SecretNames returns the sorted names of the SDS secrets held.
func (s State) SecretNames() []string { return s.Names(SecretType) }

// Secret returns the named SDS secret, or nil.
func (s State) Secret(name string) *tlsv3.Secret {
	m, _ := s.Types[SecretType].Resources[name].(*tlsv3.Secret)
	return m
}

// Cluster returns the named cluster, or nil.
func (s State) Cluster(name string) *clusterv3.Cluster {
	m, _ := s.Types[ClusterType].Resources[name].(*clusterv3.Cluster)
	return m
}

// Listener returns the named listener, or nil.
func (s State) Listener(name string) *listenerv3.Listener {
	m, _ := s.Types[ListenerType].Resources[name].(*listenerv3.Listener)
	return m
}

// RouteConfig returns the named route configuration, or nil.
func (s State) RouteConfig(name string) *routev3.RouteConfiguration {
	m, _ := s.Types[RouteType].Resources[name].(*routev3.RouteConfiguration)
	return m
}

// LoadAssignment returns the ClusterLoadAssignment held under an EDS
// resource name, or nil.
func (s State) LoadAssignment(name string) *endpointv3.ClusterLoadAssignment {
	m, _ := s.Types[EndpointType].Resources[name].(*endpointv3.ClusterLoadAssignment)
	return m
}

// Endpoints returns the endpoints of a cluster sorted by priority and
// address. cluster is resolved the way Envoy does: an EDS cluster's
// eds_cluster_config.service_name, else its name, names the
// ClusterLoadAssignment, and a non-EDS cluster uses its inline
// load_assignment. A name that is not a known cluster is looked up as an
// EDS resource name directly. It returns nil when there is nothing.
func (s State) Endpoints(cluster string) []Endpoint {
	var cla *endpointv3.ClusterLoadAssignment
	if c := s.Cluster(cluster); c != nil {
		if name, ok := edsName(c); ok {
			cla = s.LoadAssignment(name)
		} else {
			cla = c.GetLoadAssignment()
		}
	} else {
		cla = s.LoadAssignment(cluster)
	}
	if cla == nil {
		return nil
	}
	var out []Endpoint
	for _, loc := range cla.GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			out = append(out, Endpoint{
				Address:  formatAddress(lb.GetEndpoint().GetAddress()),
				Health:   lb.GetHealthStatus().String(),
				Weight:   lb.GetLoadBalancingWeight().GetValue(),
				Priority: loc.GetPriority(),
			})
		}
	}
	slices.SortFunc(out, func(a, b Endpoint) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), strings.Compare(a.Address, b.Address))
	})
	return out
}

func formatAddress(a *corev3.Address) string {
	switch {
	case a.GetSocketAddress() != nil:
		sa := a.GetSocketAddress()
		port := strconv.FormatUint(uint64(sa.GetPortValue()), 10)
		if sa.GetNamedPort() != "" {
			port = sa.GetNamedPort()
		}
		return net.JoinHostPort(sa.GetAddress(), port)
	case a.GetPipe() != nil:
		return a.GetPipe().GetPath()
	case a.GetEnvoyInternalAddress() != nil:
		return "internal:" + a.GetEnvoyInternalAddress().GetServerListenerName()
	}
	return ""
}

// String summarises the state per type (version and names, with endpoint
// counts for EDS) so that failed waits are readable.
func (s State) String() string {
	order := []string{ClusterType, EndpointType, ListenerType, RouteType, SecretType}
	for _, t := range sortedKeys(s.Types) {
		if !slices.Contains(order, t) {
			order = append(order, t)
		}
	}
	var b strings.Builder
	for _, t := range order {
		ts, ok := s.Types[t]
		if !ok {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		short := t[strings.LastIndex(t, ".")+1:]
		fmt.Fprintf(&b, "%s v=%q [", short, ts.Version)
		names := sortedKeys(ts.Resources)
		const maxNames = 20
		for i, n := range names {
			if i == maxNames {
				fmt.Fprintf(&b, " …%d more", len(names)-maxNames)
				break
			}
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(n)
			if cla, ok := ts.Resources[n].(*endpointv3.ClusterLoadAssignment); ok {
				count := 0
				for _, loc := range cla.GetEndpoints() {
					count += len(loc.GetLbEndpoints())
				}
				fmt.Fprintf(&b, "(%d)", count)
			}
		}
		b.WriteByte(']')
	}
	if b.Len() == 0 {
		return "empty"
	}
	return b.String()
}
