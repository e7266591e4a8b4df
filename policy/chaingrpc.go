package policy

import (
	"fmt"
	"slices"
	"strings"
)

// GRPCUnsupported is why gRPC clients cannot be served route r as
// written ("" when they can): the same limits grpc_service routes are
// held to (grpcRoute), for routes no one wrote for gRPC, such as a
// chain's from a service-router.
func GRPCUnsupported(r *Route) string {
	switch {
	case r.Redirect != nil:
		return "a redirect"
	case r.DirectResponse != nil:
		return "a direct response"
	case r.Rewrite != nil:
		return "a rewrite"
	case r.Mirror != nil:
		return "a mirror"
	case len(r.RequestHeaders.Add)+len(r.RequestHeaders.Set)+len(r.RequestHeaders.Remove) > 0,
		len(r.ResponseHeaders.Add)+len(r.ResponseHeaders.Set)+len(r.ResponseHeaders.Remove) > 0:
		return "header changes"
	case r.IdleTimeout > 0:
		return "an idle timeout"
	case r.Match.Method != "":
		return "a method match"
	case len(r.Match.Query) > 0:
		return "a query match"
	}
	for _, h := range r.Match.Headers {
		if n := strings.ToLower(h.Name); strings.HasPrefix(n, ":") || strings.HasPrefix(n, "grpc-") || strings.HasSuffix(n, "-bin") {
			return fmt.Sprintf("a match on header %q", h.Name)
		}
	}
	if rt := r.Retry; rt != nil {
		if rt.PerTryTimeout > 0 {
			return "a per-try timeout"
		}
		for _, on := range rt.On {
			if !slices.Contains(grpcRetryOn, on) {
				return fmt.Sprintf("retries on %q", on)
			}
		}
	}
	return ""
}
