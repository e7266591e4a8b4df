package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Services that HTTP filters call (an access-log collector) are Consul
// services like any other: each becomes a cluster with endpoints from
// Consul, watched because the policy names it, with the settings of its
// service block (TLS included). They speak gRPC, so the cluster must be
// HTTP/2: a service block for one must say http2 = true, and a collector
// without a service block gets one that does.

// grpcClusterRef is a service an HTTP filter calls over gRPC.
type grpcClusterRef struct {
	service string
	what    string
	rng     hcl.Range
	// plain marks a service called over HTTP/1.1 or HTTP/2 alike (a
	// JWKS endpoint), which need not set http2.
	plain bool
}

// grpcCluster records that what (e.g. "access_log collector") calls
// service over gRPC, written at rng.
func (r *resolver) grpcCluster(service, what string, rng hcl.Range) {
	switch {
	case service == "" || strings.Contains(service, "."):
		r.add(rng, "Invalid service name", "%s %q: name a Consul service (a cluster without a subset).", what, service)
		return
	case !ir.QueryableServiceName(service):
		r.add(rng, "Invalid service name", unqueryable, service)
		return
	}
	r.grpcClusters = append(r.grpcClusters, grpcClusterRef{service, what, rng, false})
}

// httpCluster records that what (e.g. "jwt_provider jwks_service")
// fetches from service over HTTP, written at rng.
func (r *resolver) httpCluster(service, what string, rng hcl.Range) {
	n := len(r.grpcClusters)
	r.grpcCluster(service, what, rng)
	if len(r.grpcClusters) > n {
		r.grpcClusters[n].plain = true
	}
}

// filterServices checks the services HTTP filters call, adding a service
// (HTTP/2, defaults otherwise) for each that has no service block.
func (r *resolver) filterServices() {
	added := false
	// gRPC callers first: a service both call gets an HTTP/2 cluster.
	slices.SortStableFunc(r.grpcClusters, func(a, b grpcClusterRef) int {
		switch {
		case a.plain == b.plain:
			return 0
		case b.plain:
			return -1
		}
		return 1
	})
	for _, ref := range r.grpcClusters {
		s := r.pol.Service(ref.service)
		if s == nil {
			r.pol.Services = append(r.pol.Services, &Service{
				Name:           ref.service,
				ConsulName:     ref.service,
				ConnectTimeout: DefaultConnectTimeout,
				LBPolicy:       ir.LBRoundRobin,
				HTTP2:          !ref.plain,
				Source:         fmt.Sprintf("%s (%s)", pos(ref.rng), ref.what),
			})
			added = true
			continue
		}
		if !s.HTTP2 && !ref.plain {
			r.add(ref.rng, "gRPC service without http2", "%s %q is called over gRPC, so its cluster must speak HTTP/2: set http2 = true in service %q (at %s).", ref.what, ref.service, s.Name, s.Source)
		}
	}
	if added {
		slices.SortFunc(r.pol.Services, func(a, b *Service) int { return strings.Compare(a.Name, b.Name) })
	}
}

// FilterServices lists, sorted, the services a listener's HTTP filters
// call (collectors): clusters its proxies need besides those its routes
// name.
func (l *Listener) FilterServices() []string {
	var out []string
	for _, al := range l.HTTP.AccessLogs {
		if al.Collector != "" {
			out = append(out, al.Collector)
		}
	}
	if t := l.HTTP.Tracing; t != nil {
		out = append(out, t.Collector)
	}
	if a := l.HTTP.ExtAuthz; a != nil {
		out = append(out, a.Service)
	}
	if s := l.HTTP.RateLimitService; s != nil {
		out = append(out, s.Service)
	}
	for _, p := range l.HTTP.JWTProviders {
		if p.JWKSCluster != "" {
			out = append(out, p.JWKSCluster)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
