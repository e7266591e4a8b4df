package xds

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// adsSource tells Envoy to fetch a cluster's endpoints over the same ADS
// stream, which keeps CDS and EDS updates ordered.
func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

var lbPolicies = map[ir.LBPolicy]clusterv3.Cluster_LbPolicy{
	"":                clusterv3.Cluster_ROUND_ROBIN,
	ir.LBRoundRobin:   clusterv3.Cluster_ROUND_ROBIN,
	ir.LBLeastRequest: clusterv3.Cluster_LEAST_REQUEST,
	ir.LBRingHash:     clusterv3.Cluster_RING_HASH,
	ir.LBRandom:       clusterv3.Cluster_RANDOM,
}

func buildCluster(c *ir.Cluster) *clusterv3.Cluster {
	if c.OriginalDestination {
		return originalDestinationCluster(c) // tproxy.go
	}
	if len(c.Aggregate) > 0 {
		return aggregateCluster(c) // failover.go
	}
	out := &clusterv3.Cluster{
		Name:                 c.Name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		// No service_name: the EDS resource is named like the cluster.
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()},
		ConnectTimeout:   durationpb.New(c.ConnectTimeout),
		LbPolicy:         lbPolicies[c.LBPolicy],
		// gRFC A52's list (proxyless copies): a client takes the first
		// policy it implements; LbPolicy above is for those that do not
		// read it.
		LoadBalancingPolicy: loadBalancingPolicy(c.LBPolicies),
		CommonLbConfig: &clusterv3.Cluster_CommonLbConfig{
			// Consul already tells us which endpoints are unhealthy; Envoy's
			// default panic mode (route to all hosts once half are unhealthy)
			// would send traffic to instances Consul reports as failing.
			HealthyPanicThreshold: &typev3.Percent{Value: 0},
		},
	}
	if cb := c.CircuitBreaker; cb != nil {
		out.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			Priority:           corev3.RoutingPriority_DEFAULT,
			MaxConnections:     optUInt32(cb.MaxConnections),
			MaxPendingRequests: optUInt32(cb.MaxPendingRequests),
			MaxRequests:        optUInt32(cb.MaxRequests),
			MaxRetries:         optUInt32(cb.MaxRetries),
			RetryBudget:        retryBudget(cb),
		}}}
	}
	if od := c.OutlierDetection; od != nil {
		out.OutlierDetection = &clusterv3.OutlierDetection{
			Consecutive_5Xx:    wrapperspb.UInt32(od.Consecutive5xx),
			Interval:           durationpb.New(od.Interval),
			BaseEjectionTime:   durationpb.New(od.BaseEjectionTime),
			MaxEjectionPercent: wrapperspb.UInt32(od.MaxEjectionPercent),
		}
	}
	if za := c.ZoneAware; za != nil {
		// Takes effect in proxies whose bootstrap names their local
		// cluster (bootstrap -local-service); others ignore it.
		out.CommonLbConfig.LocalityConfigSpecifier = &clusterv3.Cluster_CommonLbConfig_ZoneAwareLbConfig_{ZoneAwareLbConfig: &clusterv3.Cluster_CommonLbConfig_ZoneAwareLbConfig{
			RoutingEnabled: &typev3.Percent{Value: za.RoutingPercent},
			MinClusterSize: wrapperspb.UInt64(za.MinClusterSize),
		}}
	}
	if hc := c.HealthCheck; hc != nil {
		http := &corev3.HealthCheck_HttpHealthCheck{Path: hc.Path, Host: hc.Host}
		if c.HTTP2 {
			// Envoy's health checker speaks HTTP/1.1 unless told otherwise,
			// whatever the cluster's protocol: an HTTP/2-only (h2c)
			// upstream would fail every check and be ejected.
			http.CodecClientType = typev3.CodecClientType_HTTP2
		}
		out.HealthChecks = []*corev3.HealthCheck{{
			Timeout:            durationpb.New(hc.Timeout),
			Interval:           durationpb.New(hc.Interval),
			HealthyThreshold:   wrapperspb.UInt32(hc.HealthyThreshold),
			UnhealthyThreshold: wrapperspb.UInt32(hc.UnhealthyThreshold),
			HealthChecker:      &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: http},
		}}
	}
	if c.HTTP2 {
		out.TypedExtensionProtocolOptions = map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(&httpv3.HttpProtocolOptions{
				UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
					ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
				}},
			}),
		}
	}
	if t := c.TLS; t != nil {
		out.TransportSocket = upstreamTLS(t, c.HTTP2)
	}
	return out
}

func optUInt32(v uint32) *wrapperspb.UInt32Value {
	if v == 0 {
		return nil
	}
	return wrapperspb.UInt32(v)
}

// upstreamTLS refers to the cluster's client certificate and CA by SDS
// secret name (served over the same ADS stream), so a rotated file
// changes the secret, not the cluster. With http2 the connection offers
// ALPN "h2": Envoy sends HTTP/2 either way, but TLS servers pick the
// protocol by ALPN and fall back to HTTP/1.1 (gRPC servers refuse the
// connection) without it.
func upstreamTLS(t *ir.UpstreamTLS, http2 bool) *corev3.TransportSocket {
	if t.CertificateProvider != "" {
		return meshGRPCUpstreamTLS(t) // proxyless gRPC: no SDS
	}
	if t.Files != nil {
		return upstreamTLSFiles(t) // gateway.go
	}
	ctx := &tlsv3.UpstreamTlsContext{Sni: t.SNI, CommonTlsContext: &tlsv3.CommonTlsContext{}}
	if http2 {
		ctx.CommonTlsContext.AlpnProtocols = []string{"h2"}
	}
	if t.CertificateSecret != "" {
		ctx.CommonTlsContext.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{sdsSecret(t.CertificateSecret)}
	}
	if t.CASecret != "" {
		vc := &tlsv3.CertificateValidationContext{}
		switch {
		case len(t.MatchURISANs) > 0:
			// A mesh peer: its Connect leaf carries its SPIFFE id as URI
			// SAN and no DNS name, whatever SNI (the mesh cluster's name)
			// is sent. Checking the id is what keeps a certificate of
			// another service in the mesh from answering for this one.
			// Several when the cluster fails over to other datacenters,
			// whose sidecars carry their own datacenter's id.
			for _, san := range t.MatchURISANs {
				vc.MatchTypedSubjectAltNames = append(vc.MatchTypedSubjectAltNames, &tlsv3.SubjectAltNameMatcher{
					SanType: tlsv3.SubjectAltNameMatcher_URI,
					Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: san}},
				})
			}
		case t.SNI != "":
			// With only a trusted CA, Envoy accepts any certificate that CA
			// signed, whatever name it is for. The name Envoy asks for is
			// the name the certificate must carry (wildcards as in RFC 6125).
			vc.MatchTypedSubjectAltNames = sniMatcher(t.SNI)
		}
		// The CA comes from SDS; what is checked besides the chain stays
		// here, with the cluster.
		ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         vc,
				ValidationContextSdsSecretConfig: sdsSecret(t.CASecret),
			},
		}
	}
	return tlsSocket(ctx)
}

func sniMatcher(sni string) []*tlsv3.SubjectAltNameMatcher {
	return []*tlsv3.SubjectAltNameMatcher{{
		SanType: tlsv3.SubjectAltNameMatcher_DNS,
		Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: sni}},
	}}
}

// a52Policies are the typed configs of the policies a gRFC A52 list may
// name; each is the extension's default configuration.
var a52Policies = map[ir.LBPolicy]struct {
	name string
	cfg  proto.Message
}{
	ir.LBLeastRequest: {"envoy.load_balancing_policies.least_request", &leastrequestv3.LeastRequest{}},
	ir.LBRoundRobin:   {"envoy.load_balancing_policies.round_robin", &roundrobinv3.RoundRobin{}},
}

func loadBalancingPolicy(list []ir.LBPolicy) *clusterv3.LoadBalancingPolicy {
	if len(list) == 0 {
		return nil
	}
	out := &clusterv3.LoadBalancingPolicy{}
	for _, p := range list {
		a, ok := a52Policies[p]
		if !ok {
			continue // the model lists only these
		}
		out.Policies = append(out.Policies, &clusterv3.LoadBalancingPolicy_Policy{
			TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: a.name, TypedConfig: mustAny(a.cfg)},
		})
	}
	return out
}
