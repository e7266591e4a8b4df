package xds_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// TestProxylessServesWhatEveryGRPCClientParses checks, on every golden
// world, that the routes served to gRPC clients use only what every gRPC
// implementation in the support matrix (docs/reference/proxyless-grpc.md) parses (issue 15):
//   - header matchers: exact_match, prefix_match, safe_regex_match,
//     present_match (gRFC A28), never string_match, which C-core before
//     1.56 (gRFC A63) NACKs;
//   - weighted clusters summing to 100, which C-core before total_weight's
//     deprecation requires;
//   - an inverted value match preceded by a present match of the same
//     header, so a request without it matches in no implementation;
//   - the deadline as max_stream_duration (gRFC A31), never timeout;
//   - clusters grpc_service routes reach balanced round robin or ring
//     hash, which every implementation accepts (grpc-node and C-core NACK
//     least_request). A default API listener reaches a least_request
//     service's copy too (issue 39, item 6); otherwise it may reach any
//     cluster (random: the service may be for Envoys only, and policy
//     validation warns when the policy serves gRPC clients).
//
// Envoy routes are not held to this: they keep string_match and the
// declared weights (see the grpc_compat golden case).
func TestProxylessServesWhatEveryGRPCClientParses(t *testing.T) {
	outs := goldenOutputs(t)
	headers, splits, lrDefault := 0, 0, 0
	for _, name := range slices.Sorted(maps.Keys(outs)) {
		out := outs[name]
		clusters := map[string]*clusterv3.Cluster{}
		for _, c := range out.Shared.Clusters {
			clusters[c.GetName()] = c
		}
		for _, rc := range out.Proxyless.Routes {
			for _, vh := range rc.GetVirtualHosts() {
				for _, r := range vh.GetRoutes() {
					where := name + ": " + rc.GetName() + "/" + r.GetName()
					present := map[string]bool{}
					for _, h := range r.GetMatch().GetHeaders() {
						if h.GetPresentMatch() && !h.GetInvertMatch() {
							present[h.GetName()] = true
						}
						if h.GetInvertMatch() && !h.GetPresentMatch() && !present[h.GetName()] {
							t.Errorf("%s: header %q inverted without a present match before it: grpc-go and grpc-node do not match a request without the header, an implementation inverting the failed match would (issue 39, item 7)", where, h.GetName())
						}
						headers++
						switch h.GetHeaderMatchSpecifier().(type) {
						case *routev3.HeaderMatcher_ExactMatch, *routev3.HeaderMatcher_PrefixMatch,
							*routev3.HeaderMatcher_SafeRegexMatch, *routev3.HeaderMatcher_PresentMatch:
						default:
							t.Errorf("%s: header %q matched with %T; C-core before 1.56 NACKs anything but exact/prefix/safe_regex/present_match",
								where, h.GetName(), h.GetHeaderMatchSpecifier())
						}
					}
					a := r.GetRoute()
					if a.GetTimeout() != nil || a.GetIdleTimeout() != nil {
						t.Errorf("%s: timeout or idle_timeout set; gRPC reads max_stream_duration", where)
					}
					var names []string
					if wc := a.GetWeightedClusters(); wc != nil {
						splits++
						var sum uint32
						for _, c := range wc.GetClusters() {
							sum += c.GetWeight().GetValue()
							names = append(names, c.GetName())
						}
						if sum != 100 || wc.GetTotalWeight() != nil {
							t.Errorf("%s: weights sum to %d (total_weight %v); want 100", where, sum, wc.GetTotalWeight())
						}
					} else {
						names = append(names, a.GetCluster())
					}
					dflt := out.Proxyless.RouteSources[rc.GetName()+"/"+r.GetName()] == "default"
					for _, n := range names {
						c := clusters[n]
						if c == nil {
							continue // the consistency check covers it
						}
						if dflt {
							// A least_request service has a fallback every
							// client takes, default API listener or not.
							if strings.HasPrefix(n, "grpc:") {
								lrDefault++
							}
							if c.GetLbPolicy() == clusterv3.Cluster_LEAST_REQUEST {
								t.Errorf("%s: default API listener reaches %s with lb_policy LEAST_REQUEST; grpc-node and C-core NACK it (want its copy %s%s)", where, n, "grpc:", n)
							}
							continue
						}
						// A52's list is read by some clients only: it must end
						// in round_robin, and lb_policy say round_robin too.
						lbp := c.GetLoadBalancingPolicy().GetPolicies()
						listOK := len(lbp) == 0 || (c.GetLbPolicy() == clusterv3.Cluster_ROUND_ROBIN &&
							lbp[len(lbp)-1].GetTypedExtensionConfig().GetName() == "envoy.load_balancing_policies.round_robin")
						if lb := c.GetLbPolicy(); (lb != clusterv3.Cluster_ROUND_ROBIN && lb != clusterv3.Cluster_RING_HASH) || !listOK {
							t.Errorf("%s: cluster %s has lb_policy %v (load_balancing_policy %v); not every gRPC client accepts it", where, n, lb, c.GetLoadBalancingPolicy())
						}
					}
				}
			}
		}
	}
	// The goldens must exercise what is checked, or the test proves nothing.
	if headers < 5 || splits < 3 {
		t.Errorf("golden proxyless routes hold %d header matchers and %d splits; the grpc_compat case should bring more", headers, splits)
	}

	if lrDefault == 0 {
		t.Errorf("no golden default API listener reaches a least_request service's copy; the lb_policies case should")
	}

	// And Envoy keeps the declared form: string_match, weights 4/1.
	rc := outs["grpc_compat"].Groups["edge"].Routes[0]
	r := rc.GetVirtualHosts()[0].GetRoutes()[0]
	if _, ok := r.GetMatch().GetHeaders()[0].GetHeaderMatchSpecifier().(*routev3.HeaderMatcher_StringMatch); !ok {
		t.Errorf("Envoy route header matcher %T, want string_match", r.GetMatch().GetHeaders()[0].GetHeaderMatchSpecifier())
	}
	if w := r.GetRoute().GetWeightedClusters().GetClusters(); len(w) != 2 || w[0].GetWeight().GetValue() != 4 || w[1].GetWeight().GetValue() != 1 {
		t.Errorf("Envoy split %v, want the declared 4/1", w)
	}
}
