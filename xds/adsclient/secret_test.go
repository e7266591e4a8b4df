package adsclient

import (
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

func sds(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: adsSource()}
}

func makeSecret(name, pem string) *tlsv3.Secret {
	inline := func(s string) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: s}}
	}
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: inline(pem), PrivateKey: inline("key of " + pem),
	}}}
}

// TestSecretsFollowTransportSockets: like Envoy, the client subscribes by
// name to the SDS secrets that clusters' and listeners' TLS transport
// sockets name with an ADS sds_config (not to static ones), holds LDS
// back until the clusters' secrets arrived, and follows changes.
func TestSecretsFollowTransportSockets(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			srv := startServerADS(t, false)
			c := dial(t, srv, Config{Mode: mode})

			api := makeCluster("api")
			api.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(&tlsv3.UpstreamTlsContext{
				CommonTlsContext: &tlsv3.CommonTlsContext{
					TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sds("api/cert"), {Name: "static-in-bootstrap"}},
					ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
						DefaultValidationContext:         &tlsv3.CertificateValidationContext{},
						ValidationContextSdsSecretConfig: sds("api/ca"),
					}},
				},
			})}}
			lis := makeListener("https", "local_route")
			chain := lis.FilterChains[0]
			chain.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(&tlsv3.DownstreamTlsContext{
				CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sds("https/cert/shop")}},
			})}}
			sni := &listenerv3.FilterChain{
				FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{"blog.example.com"}},
				Filters:          chain.Filters,
				TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(&tlsv3.DownstreamTlsContext{
					CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sds("https/cert/blog")}},
				})}},
			}
			lis.FilterChains = append([]*listenerv3.FilterChain{sni}, lis.FilterChains...)
			set := func(version string, secrets ...*tlsv3.Secret) {
				t.Helper()
				res := map[resourcev3.Type][]types.Resource{
					resourcev3.ClusterType:  {api},
					resourcev3.EndpointType: {makeLoadAssignment("api-eds", []string{"10.0.0.1:443"})},
					resourcev3.ListenerType: {lis},
					resourcev3.RouteType:    {makeRoute("local_route", "api")},
				}
				for _, s := range secrets {
					res[resourcev3.SecretType] = append(res[resourcev3.SecretType], s)
				}
				snap, err := cachev3.NewSnapshot(version, res)
				if err != nil {
					t.Fatal(err)
				}
				srv.set(t, snap)
			}
			all := []string{"api/ca", "api/cert", "https/cert/blog", "https/cert/shop"}
			set("1", makeSecret("api/cert", "A"), makeSecret("api/ca", "CA"), makeSecret("https/cert/shop", "S"), makeSecret("https/cert/blog", "B"))
			st, err := c.Wait(waitCtx(t), func(s State) bool { return slices.Equal(s.SecretNames(), all) && s.RouteConfig("local_route") != nil })
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Secret("https/cert/blog").GetTlsCertificate().GetCertificateChain().GetInlineString(); got != "B" {
				t.Errorf("secret https/cert/blog = %q", got)
			}
			ev := srv.log()
			// Cluster warming: the clusters' secrets arrive before LDS is
			// asked for.
			firstSDS := slices.IndexFunc(ev, func(e event) bool { return e.response && e.typ == SecretType })
			firstLDS := slices.IndexFunc(ev, func(e event) bool { return !e.response && e.typ == ListenerType })
			if firstSDS < 0 || firstLDS < firstSDS {
				t.Errorf("LDS requested before the clusters' secrets arrived:\n%s", dump(ev))
			}
			for _, e := range ev {
				if !e.response && slices.Contains(e.names, "static-in-bootstrap") {
					t.Errorf("subscribed to a secret without an ADS sds_config: %+v", e)
				}
			}

			// A secret's new contents are taken; a secret nobody names any
			// more is dropped.
			lis.FilterChains = lis.FilterChains[1:]
			set("2", makeSecret("api/cert", "A2"), makeSecret("api/ca", "CA"), makeSecret("https/cert/shop", "S"))
			if _, err := c.Wait(waitCtx(t), func(s State) bool {
				return s.Secret("api/cert").GetTlsCertificate().GetCertificateChain().GetInlineString() == "A2" &&
					!slices.Contains(s.SecretNames(), "https/cert/blog")
			}); err != nil {
				t.Fatal(err)
			}
			if n := c.Stats().NACKs; len(n) > 0 {
				t.Errorf("NACKs: %v", n)
			}
			if s := c.Snapshot().String(); !strings.Contains(s, "Secret v=") {
				t.Errorf("State.String does not show secrets: %s", s)
			}
		})
	}
}
