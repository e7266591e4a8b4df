package policy

import (
	"strings"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Resolving the listener filters that decide whether a request may pass
// at all: external authorization, JWT authentication and the global rate
// limit. Each calls a service (the authorization service, a JWKS
// endpoint, the rate-limit service) that is a Consul service, recorded
// with grpcCluster so that it becomes a watched cluster.

var failureModes = []string{"deny", "allow"}

// extAuthz resolves a listener's ext_authz block.
func (r *resolver) extAuthz(b *extAuthzBlock) *ir.ExtAuthz {
	if b == nil {
		return nil
	}
	a := &ir.ExtAuthz{Service: b.Service}
	r.grpcCluster(b.Service, "ext_authz service", valueRange(b.Body, "service", b.DefRange))
	if b.Timeout != nil && !isNull(b.Timeout) {
		if ds := durationAttr(b.Timeout, &a.Timeout); ds.HasErrors() {
			r.extend(ds)
		} else if a.Timeout <= 0 || a.Timeout%time.Millisecond != 0 {
			r.add(b.Timeout.Range(), "Invalid timeout", "ext_authz timeout %s: a positive whole number of milliseconds, e.g. \"250ms\"; every request waits for the check.", a.Timeout)
		}
	}
	if b.FailureMode != nil {
		if !oneOf(*b.FailureMode, failureModes) {
			r.add(valueRange(b.Body, "failure_mode", b.DefRange), "Invalid failure_mode", "%q is not one of %s: what Envoy does with a request when the service cannot answer.", *b.FailureMode, quoteList(failureModes))
		}
		a.FailureModeAllow = *b.FailureMode == "allow"
	}
	for i, h := range b.Headers {
		if !headerName.MatchString(h) {
			r.add(elemRange(b.Body, "headers", i, b.DefRange), "Invalid header name", "headers: %q is not a valid HTTP header name.", h)
		}
		a.Headers = append(a.Headers, strings.ToLower(h))
	}
	return a
}
