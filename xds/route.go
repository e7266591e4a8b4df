package xds

import (
	"maps"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// buildRouteConfig is the RDS resource of an HTTP listener, named like it.
// proxyless marks the routes of an API listener for gRPC clients, which
// take a call's deadline from max_stream_duration rather than timeout.
func buildRouteConfig(l *ir.Listener, proxyless bool) *routev3.RouteConfiguration {
	rc := &routev3.RouteConfiguration{Name: l.Name}
	for i := range l.VirtualHosts {
		vh := &l.VirtualHosts[i]
		v := &routev3.VirtualHost{Name: vh.Name, Domains: vh.Domains, TypedPerFilterConfig: perFilterConfig(&vh.HTTP, nil), RateLimits: globalRateLimits(vh.HTTP.GlobalRateLimits)}
		for j := range vh.Routes {
			v.Routes = append(v.Routes, buildRoute(&vh.Routes[j], proxyless))
		}
		rc.VirtualHosts = append(rc.VirtualHosts, v)
	}
	return rc
}

func buildRoute(r *ir.Route, proxyless bool) *routev3.Route {
	out := &routev3.Route{
		Name:                    r.Name,
		Match:                   buildMatch(&r.Match, proxyless),
		RequestHeadersToAdd:     headerOptions(r.RequestHeaders),
		RequestHeadersToRemove:  r.RequestHeaders.Remove,
		ResponseHeadersToAdd:    headerOptions(r.ResponseHeaders),
		ResponseHeadersToRemove: r.ResponseHeaders.Remove,
	}
	switch {
	case r.Redirect != nil:
		out.Action = &routev3.Route_Redirect{Redirect: buildRedirect(r.Redirect)}
	case r.DirectResponse != nil:
		dr := &routev3.DirectResponseAction{Status: uint32(r.DirectResponse.Status)}
		if r.DirectResponse.Body != "" {
			dr.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: r.DirectResponse.Body}}
		}
		out.Action = &routev3.Route_DirectResponse{DirectResponse: dr}
	default:
		out.Action = &routev3.Route_Route{Route: buildRouteAction(r, proxyless)}
	}
	if f := r.Fault; f != nil {
		out.TypedPerFilterConfig = map[string]*anypb.Any{faultFilter: mustAny(buildFault(f))}
	}
	out.TypedPerFilterConfig = perFilterConfig(&r.HTTP, out.TypedPerFilterConfig)
	routeHTTPFeatures(out, &r.HTTP)
	return out
}

// buildMatch renders a route's match. For gRPC clients (proxyless) header
// matchers use the fields every gRPC implementation parses (see
// grpcHeaderMatch); Envoy routes use string_match.
func buildMatch(m *ir.RouteMatch, proxyless bool) *routev3.RouteMatch {
	rm := &routev3.RouteMatch{}
	switch {
	case m.Path != "":
		rm.PathSpecifier = &routev3.RouteMatch_Path{Path: m.Path}
	case m.PathRegex != "":
		regex := m.PathRegex
		if !m.CaseSensitive {
			// Envoy ignores case_sensitive for safe_regex; RE2's flag
			// is the only way to match the path regardless of case.
			regex = "(?i)" + regex
		}
		rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: regex}}
	default:
		prefix := m.PathPrefix
		if prefix == "" {
			prefix = "/"
		}
		rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: prefix}
	}
	if _, regex := rm.PathSpecifier.(*routev3.RouteMatch_SafeRegex); !m.CaseSensitive && !regex {
		rm.CaseSensitive = wrapperspb.Bool(false)
	}
	if m.Method != "" {
		rm.Headers = append(rm.Headers, &routev3.HeaderMatcher{
			Name:                 ":method",
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: exactMatcher(m.Method)},
		})
	}
	for _, h := range m.Headers {
		if proxyless && h.Invert && !h.Present {
			// An inverted value match on a request without the header:
			// grpc-go and grpc-node (and Envoy, treat_missing_header_as_empty
			// off) do not match: an absent header fails a value matcher
			// before inversion. An implementation that inverts the failed
			// match, as a literal reading of gRFC A28's invert_match
			// gives, would. Requiring the header first means the same to
			// every reader: grpc-go's and grpc-node's meaning.
			rm.Headers = append(rm.Headers, &routev3.HeaderMatcher{Name: h.Name, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}})
		}
		hm := &routev3.HeaderMatcher{Name: h.Name, InvertMatch: h.Invert}
		switch {
		case h.Present:
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
		case proxyless:
			grpcHeaderMatch(hm, h)
		default:
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: stringMatcher(h)}
		}
		rm.Headers = append(rm.Headers, hm)
	}
	for _, q := range m.Query {
		qm := &routev3.QueryParameterMatcher{Name: q.Name}
		if q.Present {
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true}
		} else {
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_StringMatch{StringMatch: stringMatcher(q)}
		}
		rm.QueryParameters = append(rm.QueryParameters, qm)
	}
	return rm
}

// grpcHeaderMatch sets hm's value match with HeaderMatcher's original
// fields. gRPC C-core (and the Python, Ruby, PHP and C++ wrappers)
// before 1.56 parses only these and NACKs string_match ("Invalid route
// header matcher specified"); gRFC A63 added string_match and keeps these
// supported in every gRPC implementation, so they reach old and new
// clients alike. They are deprecated in Envoy's API, which is why Envoy
// routes keep string_match.
func grpcHeaderMatch(hm *routev3.HeaderMatcher, v ir.ValueMatch) {
	switch {
	case v.Prefix != "":
		hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_PrefixMatch{PrefixMatch: v.Prefix}
	case v.Regex != "":
		hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcherv3.RegexMatcher{Regex: v.Regex}}
	default:
		hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_ExactMatch{ExactMatch: v.Exact}
	}
}

func exactMatcher(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
}

func stringMatcher(v ir.ValueMatch) *matcherv3.StringMatcher {
	switch {
	case v.Prefix != "":
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: v.Prefix}}
	case v.Regex != "":
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: v.Regex}}}
	default:
		return exactMatcher(v.Exact)
	}
}

func buildRouteAction(r *ir.Route, proxyless bool) *routev3.RouteAction {
	a := &routev3.RouteAction{}
	if len(r.Clusters) == 1 && r.Clusters[0].Weight > 0 {
		a.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: r.Clusters[0].Name}
	} else {
		weights := make([]uint32, len(r.Clusters))
		for i, c := range r.Clusters {
			weights[i] = c.Weight
		}
		if proxyless {
			weights = percentWeights(weights)
		}
		wc := &routev3.WeightedCluster{}
		for i, c := range r.Clusters {
			wc.Clusters = append(wc.Clusters, &routev3.WeightedCluster_ClusterWeight{Name: c.Name, Weight: wrapperspb.UInt32(weights[i])})
		}
		a.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	if proxyless {
		// gRPC ignores timeout (gRFC A31): the call deadline is
		// max_stream_duration, 0 meaning none.
		if d := routeTimeout(r.Timeout); d != nil {
			a.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: d}
		}
	} else {
		a.Timeout = routeTimeout(r.Timeout)
		a.IdleTimeout = routeTimeout(r.IdleTimeout)
	}
	if rp := r.Retry; rp != nil {
		a.RetryPolicy = &routev3.RetryPolicy{
			RetryOn:    strings.Join(rp.On, ","),
			NumRetries: wrapperspb.UInt32(rp.Attempts),
		}
		if rp.PerTryTimeout > 0 {
			a.RetryPolicy.PerTryTimeout = durationpb.New(rp.PerTryTimeout)
		}
		a.RetryPolicy.RetryBackOff = retryBackOff(rp)
	}
	if rw := r.Rewrite; rw != nil {
		switch {
		case rw.Prefix != "":
			a.PrefixRewrite = rw.Prefix
		case rw.Regex != "":
			a.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{
				Pattern:      &matcherv3.RegexMatcher{Regex: rw.Regex},
				Substitution: rw.Substitution,
			}
		}
		if rw.Host != "" {
			a.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: rw.Host}
		}
	}
	if m := r.Mirror; m != nil {
		a.RequestMirrorPolicies = []*routev3.RouteAction_RequestMirrorPolicy{{
			Cluster:         m.Cluster,
			RuntimeFraction: &corev3.RuntimeFractionalPercent{DefaultValue: fraction(m.Percent)},
		}}
	}
	for _, h := range r.HashPolicies {
		hp := &routev3.RouteAction_HashPolicy{Terminal: h.Terminal}
		switch {
		case h.Header != "":
			hp.PolicySpecifier = &routev3.RouteAction_HashPolicy_Header_{Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: h.Header}}
		case h.Cookie != "":
			hp.PolicySpecifier = &routev3.RouteAction_HashPolicy_Cookie_{Cookie: &routev3.RouteAction_HashPolicy_Cookie{Name: h.Cookie}}
		default:
			hp.PolicySpecifier = &routev3.RouteAction_HashPolicy_ConnectionProperties_{ConnectionProperties: &routev3.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}
		}
		a.HashPolicy = append(a.HashPolicy, hp)
	}
	return a
}

var redirectCodes = map[int]routev3.RedirectAction_RedirectResponseCode{
	301: routev3.RedirectAction_MOVED_PERMANENTLY,
	302: routev3.RedirectAction_FOUND,
	303: routev3.RedirectAction_SEE_OTHER,
	307: routev3.RedirectAction_TEMPORARY_REDIRECT,
	308: routev3.RedirectAction_PERMANENT_REDIRECT,
}

func buildRedirect(r *ir.Redirect) *routev3.RedirectAction {
	ra := &routev3.RedirectAction{
		HostRedirect: r.Host,
		PortRedirect: r.Port,
		ResponseCode: redirectCodes[r.Status],
		StripQuery:   r.StripQuery,
	}
	switch r.Scheme {
	case "https":
		ra.SchemeRewriteSpecifier = &routev3.RedirectAction_HttpsRedirect{HttpsRedirect: true}
	case "http":
		ra.SchemeRewriteSpecifier = &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: "http"}
	}
	switch {
	case r.Path != "":
		ra.PathRewriteSpecifier = &routev3.RedirectAction_PathRedirect{PathRedirect: r.Path}
	case r.Prefix != "":
		ra.PathRewriteSpecifier = &routev3.RedirectAction_PrefixRewrite{PrefixRewrite: r.Prefix}
	}
	return ra
}

// headerOptions renders add (append) and set (overwrite) in a stable order.
func headerOptions(h ir.HeaderMutation) []*corev3.HeaderValueOption {
	var out []*corev3.HeaderValueOption
	for _, k := range slices.Sorted(maps.Keys(h.Add)) {
		out = append(out, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: k, Value: h.Add[k]},
			AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD,
		})
	}
	for _, k := range slices.Sorted(maps.Keys(h.Set)) {
		out = append(out, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: k, Value: h.Set[k]},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	return out
}

// fraction expresses a percentage in millionths, keeping fractional
// percentages such as 0.5% exact.
func fraction(percent float64) *typev3.FractionalPercent {
	return &typev3.FractionalPercent{Numerator: uint32(percent*10000 + 0.5), Denominator: typev3.FractionalPercent_MILLION}
}

func buildFault(f *ir.Fault) *faultv3.HTTPFault {
	hf := &faultv3.HTTPFault{}
	if f.Delay > 0 {
		hf.Delay = &faultcommonv3.FaultDelay{
			FaultDelaySecifier: &faultcommonv3.FaultDelay_FixedDelay{FixedDelay: durationpb.New(f.Delay)},
			Percentage:         fraction(f.DelayPercent),
		}
	}
	if f.AbortStatus > 0 {
		hf.Abort = &faultv3.FaultAbort{
			ErrorType:  &faultv3.FaultAbort_HttpStatus{HttpStatus: uint32(f.AbortStatus)},
			Percentage: fraction(f.AbortPercent),
		}
	}
	return hf
}

// routeTimeout maps unset to Envoy's default (nil) and ir.NoTimeout to 0s,
// which Envoy reads as "no timeout".
func routeTimeout(d time.Duration) *durationpb.Duration {
	switch {
	case d == ir.NoTimeout:
		return durationpb.New(0)
	case d > 0:
		return durationpb.New(d)
	}
	return nil
}
