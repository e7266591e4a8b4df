package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// What gRPC's xDS client (grpc-go's xdsresource package, gRFCs A27, A28,
// A31, A33, A42, A44) accepts. Routes of a grpc_service are checked against
// it here, so a policy never serves a proxyless client something it rejects
// or silently ignores.
var (
	// grpcServiceName is what may follow xds:/// in a target and so name
	// the LDS and RDS resources: a host name, optionally with a port.
	grpcServiceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)
	// grpcRetryOn are the retry_on conditions gRPC understands (status
	// codes); it ignores Envoy's HTTP conditions.
	grpcRetryOn = []string{"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}
	// grpcLBPolicies are the cluster lb_policy values every gRPC
	// implementation accepts; each rejects a cluster with any other.
	// least_request (gRFC A48) is not one: grpc-java and grpc-go have it,
	// but grpc-node and C-core (with Python, Ruby, PHP, C++) NACK the
	// cluster, and whichever client dialed it could no longer call.
	grpcLBPolicies = []ir.LBPolicy{ir.LBRoundRobin, ir.LBRingHash}
)

// grpcTargetRef is a service a grpc_service route sends calls to, checked
// once every service block is known.
type grpcTargetRef struct {
	grpcService string
	service     string
	rng         hcl.Range
}

func (r *resolver) grpcService(b *grpcServiceBlock) *GRPCService {
	g := &GRPCService{Name: b.Name, Source: pos(b.DefRange)}
	if !grpcServiceName.MatchString(b.Name) || strings.HasPrefix(b.Name, "xdstp:") {
		r.add(b.DefRange, "Invalid grpc_service name",
			"grpc_service %q: the name is what clients dial as xds:///NAME, a host name with an optional port (letters, digits, '.', '-', '_', ':'), e.g. \"echo\" or \"echo.internal:50051\".", b.Name)
	}
	if len(b.Routes) == 0 {
		r.add(b.DefRange, "grpc_service without routes",
			"grpc_service %q has no route block, so every call to xds:///%s would fail; add a route block, e.g. route { service = \"%s\" }.", b.Name, b.Name, b.Name)
	}
	for _, rb := range b.Routes {
		g.Routes = append(g.Routes, r.grpcRoute(b.Name, rb))
	}
	return g
}

// grpcRoute resolves a route of a grpc_service: the route block of proxy
// listeners without what gRPC cannot do.
func (r *resolver) grpcRoute(name string, b *routeBlock) *Route {
	where := fmt.Sprintf("route of grpc_service %q", name)
	unsupported := func(rng hcl.Range, what, why string) {
		r.add(rng, "Unsupported in a grpc_service", "%s: %s: %s", where, what, why)
	}
	if b.Redirect != nil {
		unsupported(b.Redirect.DefRange, "redirect", "gRPC's xDS client cannot answer a call with a redirect; route to a service with service = \"...\" or split blocks.")
	}
	if b.DirectResponse != nil {
		unsupported(b.DirectResponse.DefRange, "direct_response", "gRPC's xDS client cannot answer a call itself; to fail calls on purpose use fault { abort { ... } }.")
	}
	if b.Rewrite != nil {
		unsupported(b.Rewrite.DefRange, "rewrite", "gRPC's xDS client does not rewrite the path (the method name) or the authority.")
	}
	if b.Mirror != nil {
		unsupported(b.Mirror.DefRange, "mirror", "gRPC's xDS client does not mirror calls.")
	}
	for _, h := range []*headersBlock{b.RequestHeaders, b.ResponseHeaders} {
		if h != nil {
			unsupported(h.DefRange, "request_headers/response_headers", "gRPC's xDS client does not change metadata; set it in the client (e.g. with an interceptor).")
		}
	}
	r.grpcUnsupportedHTTP(b, unsupported)
	if b.IdleTimeout != nil && !isNull(b.IdleTimeout) {
		unsupported(b.IdleTimeout.Range(), "idle_timeout", "gRPC's xDS client has no per-route idle timeout; timeout (a deadline for the whole call) is supported.")
	}
	if m := b.Match; m != nil {
		if m.Method != nil {
			unsupported(valueRange(m.Body, "method", m.DefRange), "method", "every gRPC call is an HTTP POST; match the gRPC method by path (\"/package.Service/Method\") or path_prefix (\"/package.Service/\").")
		}
		for _, q := range m.Query {
			unsupported(q.DefRange, "query", "gRPC calls have no query string, and gRPC's xDS client skips routes that match on one.")
		}
		for _, h := range m.Headers {
			n := strings.ToLower(h.Name)
			switch {
			case strings.HasPrefix(n, ":"):
				unsupported(h.DefRange, fmt.Sprintf("header %q", h.Name), "gRPC's xDS client matches metadata, not pseudo-headers; match the path with path or path_prefix.")
			case strings.HasPrefix(n, "grpc-"):
				unsupported(h.DefRange, fmt.Sprintf("header %q", h.Name), "headers starting with \"grpc-\" are gRPC's own and never match.")
			case strings.HasSuffix(n, "-bin"):
				unsupported(h.DefRange, fmt.Sprintf("header %q", h.Name), "binary (\"-bin\") metadata never matches in gRPC's xDS client.")
			}
		}
	}
	if rb := b.Retry; rb != nil {
		if rb.PerTryTimeout != nil && !isNull(rb.PerTryTimeout) {
			unsupported(rb.PerTryTimeout.Range(), "per_try_timeout", "gRPC retries within the call's own deadline and has no per-try timeout; remove it.")
		}
		for i, on := range rb.On {
			if !oneOf(on, grpcRetryOn) {
				r.add(elemRange(rb.Body, "on", i, rb.DefRange), "Invalid retry condition for gRPC",
					"%s: %q is not a condition gRPC retries on; it retries on status codes: %s.", where, on, quoteList(grpcRetryOn))
			}
		}
	}

	rt := r.route(b, where)
	if rt.Retry != nil && (b.Retry == nil || len(b.Retry.On) == 0) {
		// The proxy default (5xx, connect-failure, reset) means nothing to
		// gRPC, which would then not retry at all.
		rt.Retry.On = []string{"unavailable"}
	}
	if b.Service != nil {
		r.grpcTargets = append(r.grpcTargets, grpcTargetRef{name, *b.Service, valueRange(b.Body, "service", b.DefRange)})
	}
	for _, sp := range b.Splits {
		r.grpcTargets = append(r.grpcTargets, grpcTargetRef{name, sp.Service, valueRange(sp.Body, "service", sp.DefRange)})
	}
	return rt
}

// checkGRPCTargets flags service settings that some gRPC implementation
// rejects (the whole cluster: calls to it would fail) or that every one
// ignores, for the services grpc_service routes send calls to; the
// proxyless support matrix (docs/reference/proxyless-grpc.md) is the reference. A service only
// proxies use may keep them; see checkDefaultAPIListeners.
func (r *resolver) checkGRPCTargets() {
	warned := map[string]bool{} // service: ignored settings warned about once
	for _, ref := range r.grpcTargets {
		s := r.pol.Service(ref.service)
		if s == nil {
			continue // defaults: round robin, plaintext
		}
		switch {
		case s.LBPolicy == ir.LBLeastRequest:
			r.warn(ref.rng, "least_request falls back to round_robin for some gRPC clients",
				"grpc_service %q routes to service %q, whose lb_policy is \"least_request\" (at %s): %s See the proxyless support matrix in docs/reference/proxyless-grpc.md.",
				ref.grpcService, s.Name, s.Source, leastRequestFallback(s.Name))
		case !oneOf(s.LBPolicy, grpcLBPolicies):
			r.add(ref.rng, "lb_policy not supported by gRPC",
				"grpc_service %q routes to service %q, whose lb_policy %q gRPC's xDS client rejects (it supports round_robin and ring_hash); change the service's lb_policy (at %s).",
				ref.grpcService, s.Name, s.LBPolicy, s.Source)
		}
		if s.TLS != nil {
			r.add(ref.rng, "tls not supported by gRPC",
				"grpc_service %q routes to service %q, whose tls block is served with SDS secrets; gRPC's xDS client accepts only certificate providers and rejects the cluster. Route gRPC clients to a service without tls (at %s).",
				ref.grpcService, s.Name, s.Source)
		}
		if s.LBPolicy == ir.LBRingHash {
			for _, hp := range s.HashPolicies {
				if hp.Header == "" {
					r.warn(ref.rng, "hash_policy ignored by gRPC",
						"grpc_service %q routes to service %q, whose ring_hash hash_policy uses a cookie or source_ip; gRPC's xDS client hashes only on headers and ignores it, so each call picks a random endpoint unless a header hash_policy applies.",
						ref.grpcService, s.Name)
					break
				}
			}
		}
		if warned[s.Name] {
			continue
		}
		warned[s.Name] = true
		if s.OutlierDetection != nil {
			r.warn(ref.rng, "outlier_detection works differently in gRPC",
				"grpc_service %q routes to service %q, whose outlier_detection ejects after consecutive_5xx errors; gRPC clients ignore consecutive_5xx (gRFC A50 implements success-rate and failure-percentage ejection only) and, because the block is present, eject by success rate with Envoy's defaults instead (at least 5 instances with 100 calls each per interval, 1.9 standard deviations below the mean) (at %s).",
				ref.grpcService, s.Name, s.Source)
		}
		if cb := s.CircuitBreaker; cb != nil && (cb.MaxConnections > 0 || cb.MaxPendingRequests > 0 || cb.MaxRetries > 0) {
			r.warn(ref.rng, "circuit_breaker partly ignored by gRPC",
				"grpc_service %q routes to service %q, whose circuit_breaker sets max_connections, max_pending_requests or max_retries; gRPC clients honour max_requests only (gRFC A32) and ignore the rest (at %s).",
				ref.grpcService, s.Name, s.Source)
		}
	}
}

// checkDefaultAPIListeners warns about services whose cluster some gRPC
// implementation rejects when the policy is used with gRPC clients (it
// declares a grpc_service or a proxyless group): every service cluster
// has a default API listener, xds:///SERVICE, so a gRPC client may dial
// one no grpc_service names, and would NACK it. Only a warning: the
// service may be meant for Envoys alone, and a gRPC client's NACK is shown
// on /v1/proxies.
func (r *resolver) checkDefaultAPIListeners() {
	proxyless := len(r.pol.GRPCServices) > 0 || slices.ContainsFunc(r.pol.Proxies, func(p *Proxy) bool { return p.Proxyless })
	if !proxyless {
		return
	}
	routed := map[string]bool{}
	for _, ref := range r.grpcTargets {
		routed[ref.service] = true
	}
	for _, s := range r.pol.Services {
		b := r.services[s.Name]
		if b == nil || routed[s.Name] || r.pol.GRPCService(s.Name) != nil || oneOf(s.LBPolicy, grpcLBPolicies) {
			continue
		}
		if s.LBPolicy == ir.LBLeastRequest {
			r.warn(valueRange(b.Body, "lb_policy", b.DefRange), "least_request falls back to round_robin for some gRPC clients",
				"service %q has lb_policy \"least_request\", and this policy serves gRPC clients (xds:///%s): %s", s.Name, s.Name, leastRequestFallback(s.Name))
			continue
		}
		r.warn(valueRange(b.Body, "lb_policy", b.DefRange), "Default API listener gRPC clients reject",
			"service %q has lb_policy %q, and this policy serves gRPC clients: a client dialing xds:///%s gets its default API listener and rejects the cluster (%s). Use round_robin or ring_hash if gRPC clients call it.",
			s.Name, s.LBPolicy, s.Name, grpcLBRejection(s.LBPolicy))
	}
}

// leastRequestFallback says what gRPC clients get for a least_request
// service (model: proxylessCopies).
func leastRequestFallback(service string) string {
	return fmt.Sprintf("gRPC clients get the copy %s%s of its cluster: lb_policy round_robin with gRFC A52's load_balancing_policy list [least_request, round_robin], so grpc-go and grpc-java (which read the list and implement least_request) balance least_request, grpc-node takes round_robin from the list, and gRPC C-core before 1.55 (which ignores the list) round_robin from lb_policy; Envoys keep least_request.", ir.ProxylessClusterPrefix, service)
}

// grpcLBRejection says which gRPC implementations NACK a cluster with lb.
func grpcLBRejection(lb ir.LBPolicy) string {
	if lb == ir.LBLeastRequest {
		return "grpc-node and gRPC C-core do; grpc-java and grpc-go accept it"
	}
	return "every gRPC implementation does"
}
