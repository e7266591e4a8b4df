package xds

import (
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// buildSecret renders an SDS secret with its PEM contents inline: the
// bridge reads the files, Envoy needs none of them on its host.
func buildSecret(s *ir.Secret) *tlsv3.Secret {
	out := &tlsv3.Secret{Name: s.Name}
	if len(s.TrustedCA) > 0 {
		out.Type = &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: inlinePEM(s.TrustedCA),
		}}
		return out
	}
	out.Type = &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: inlinePEM(s.CertificateChain),
		PrivateKey:       inlinePEM(s.PrivateKey),
	}}
	return out
}

func inlinePEM(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: string(b)}}
}

// sdsSecret refers to a secret served over the ADS stream.
func sdsSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: adsSource()}
}

func tlsSocket(ctx proto.Message) *corev3.TransportSocket {
	return &corev3.TransportSocket{
		Name:       wellknown.TransportSocketTLS,
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)},
	}
}

var tlsVersions = map[string]tlsv3.TlsParameters_TlsProtocol{
	"":    tlsv3.TlsParameters_TLS_AUTO,
	"1.0": tlsv3.TlsParameters_TLSv1_0,
	"1.1": tlsv3.TlsParameters_TLSv1_1,
	"1.2": tlsv3.TlsParameters_TLSv1_2,
	"1.3": tlsv3.TlsParameters_TLSv1_3,
}

// downstreamTLS is the transport socket of a TLS listener's filter chain
// that serves the certificate in secret certSecret. It carries secret
// names only, never PEM, so the listener's version does not change when
// a certificate is rotated.
func downstreamTLS(t *ir.DownstreamTLS, certSecret string) *corev3.TransportSocket {
	common := &tlsv3.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsSecret(certSecret)},
		AlpnProtocols:                  t.ALPN,
	}
	if t.MinVersion != "" || t.MaxVersion != "" {
		common.TlsParams = &tlsv3.TlsParameters{
			TlsMinimumProtocolVersion: tlsVersions[t.MinVersion],
			TlsMaximumProtocolVersion: tlsVersions[t.MaxVersion],
		}
	}
	ctx := &tlsv3.DownstreamTlsContext{CommonTlsContext: common}
	if t.ClientCASecret != "" {
		common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{
			ValidationContextSdsSecretConfig: sdsSecret(t.ClientCASecret),
		}
		ctx.RequireClientCertificate = wrapperspb.Bool(true)
	}
	return tlsSocket(ctx)
}

// SecretReferences lists the SDS secrets (fetched over ADS) the TLS
// transport sockets of a cluster or listener name, sorted and unique.
func SecretReferences(r types.Resource) ([]string, error) {
	var sockets []*corev3.TransportSocket
	switch r := r.(type) {
	case *clusterv3.Cluster:
		sockets = append(sockets, r.GetTransportSocket())
		for _, m := range r.GetTransportSocketMatches() {
			sockets = append(sockets, m.GetTransportSocket())
		}
	case *listenerv3.Listener:
		for _, fc := range r.GetFilterChains() {
			sockets = append(sockets, fc.GetTransportSocket())
		}
		sockets = append(sockets, r.GetDefaultFilterChain().GetTransportSocket())
	}
	var names []string
	for _, ts := range sockets {
		tc := ts.GetTypedConfig()
		if tc == nil {
			continue
		}
		var common *tlsv3.CommonTlsContext
		switch tc.GetTypeUrl() {
		case "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext":
			u := &tlsv3.UpstreamTlsContext{}
			if err := tc.UnmarshalTo(u); err != nil {
				return nil, err
			}
			common = u.GetCommonTlsContext()
		case "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext":
			d := &tlsv3.DownstreamTlsContext{}
			if err := tc.UnmarshalTo(d); err != nil {
				return nil, err
			}
			common = d.GetCommonTlsContext()
		default:
			continue
		}
		configs := slices.Clone(common.GetTlsCertificateSdsSecretConfigs())
		configs = append(configs, common.GetValidationContextSdsSecretConfig(),
			common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig())
		for _, c := range configs {
			if c.GetSdsConfig().GetAds() != nil && c.GetName() != "" {
				names = append(names, c.GetName())
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}
