package xds_test

import (
	"errors"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/irtest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// Model builders shared with the serving tests (internal/irtest).
var (
	cluster      = irtest.Cluster
	ep           = irtest.Endpoint
	httpListener = irtest.HTTPListener
	routeTo      = irtest.RouteTo
	certSecret   = irtest.CertSecret
	tlsModel     = irtest.TLSModel
)

// TestRedactLooksInsideAny: a private key inline in a listener's TLS
// context (typed_config, an Any) is redacted too, on a copy.
func TestRedactLooksInsideAny(t *testing.T) {
	ctx := &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{{
		CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "CHAIN"}},
		PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte("TOPSECRET")}},
	}}}}
	a, _ := anypb.New(ctx)
	l := &listenerv3.Listener{Name: "l", FilterChains: []*listenerv3.FilterChain{{TransportSocket: &corev3.TransportSocket{
		Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: a},
	}}}}
	orig := proto.Clone(l)
	red := xds.Redact(l)
	b, _ := protojson.Marshal(red)
	if strings.Contains(string(b), "VE9QU0VDUkVU") || strings.Contains(string(b), "TOPSECRET") || !strings.Contains(string(b), "[redacted]") || !strings.Contains(string(b), "CHAIN") {
		t.Errorf("redacted listener = %s", b)
	}
	if !proto.Equal(orig, l) {
		t.Error("Redact changed its argument")
	}
	plain := &listenerv3.Listener{Name: "plain"}
	if xds.Redact(plain) != types.Resource(plain) {
		t.Error("Redact copied a message with nothing to redact")
	}
}

// TestConsistentNeedsSecrets: a group whose listener names a secret it is
// not served is inconsistent; its proxies would wait for it forever.
func TestConsistentNeedsSecrets(t *testing.T) {
	out := translate(t, tlsModel("1"))
	edge := out.Groups["edge"]
	group := &xds.Resources{Listeners: edge.Listeners, Routes: edge.Routes, Secrets: edge.Secrets[1:]} // shop only
	err := xds.Consistent(out.Shared, group)
	if !errors.Is(err, xds.ErrInconsistent) || !strings.Contains(err.Error(), `"edge.https" refers to secret "edge.https/cert/blog"`) {
		t.Fatalf("Consistent = %v", err)
	}
	if err := xds.Consistent(out.Shared, edge); err != nil {
		t.Fatal(err)
	}
	noRoutes := &xds.Resources{Listeners: edge.Listeners, Secrets: edge.Secrets}
	if err := xds.Consistent(out.Shared, noRoutes); !errors.Is(err, xds.ErrInconsistent) || !strings.Contains(err.Error(), `route configuration "edge.https", which is not served`) {
		t.Fatalf("Consistent without routes = %v", err)
	}
	unreferenced := &xds.Resources{Routes: edge.Routes, Secrets: edge.Secrets}
	if err := xds.Consistent(out.Shared, unreferenced); !errors.Is(err, xds.ErrInconsistent) || !strings.Contains(err.Error(), `route configuration "edge.https" is served but no listener refers to it`) {
		t.Fatalf("Consistent with an unreferenced route configuration = %v", err)
	}
	orphanEndpoints := &xds.Resources{Endpoints: out.Shared.Endpoints}
	if err := xds.Consistent(orphanEndpoints, nil); !errors.Is(err, xds.ErrInconsistent) || !strings.Contains(err.Error(), `endpoints "api" is served but no cluster refers to it`) {
		t.Fatalf("Consistent with unreferenced endpoints = %v", err)
	}
	noEndpoints := &xds.Resources{Clusters: out.Shared.Clusters, Secrets: out.Shared.Secrets}
	if err := xds.Consistent(noEndpoints, nil); !errors.Is(err, xds.ErrInconsistent) || !strings.Contains(err.Error(), `endpoints "api", which is not served`) {
		t.Fatalf("Consistent without endpoints = %v", err)
	}
}

// TestTranslateRejectsUnreadSecrets: a model built from a policy whose
// files were never read has empty secrets; Translate refuses it rather
// than serve certificates without contents.
func TestTranslateRejectsUnreadSecrets(t *testing.T) {
	m := tlsModel("1")
	m.Groups[0].Secrets[0] = ir.Secret{Name: "edge.https/cert/blog"}
	if _, err := xds.Translate(m); err == nil || !strings.Contains(err.Error(), "were the policy's TLS files read?") {
		t.Fatalf("Translate = %v", err)
	}
	m = tlsModel("1")
	m.Groups[0].Secrets = m.Groups[0].Secrets[1:]
	if _, err := xds.Translate(m); err == nil || !strings.Contains(err.Error(), `listener "edge.https" refers to secret "edge.https/cert/blog", which does not exist`) {
		t.Fatalf("Translate = %v", err)
	}
}

func chainOf(s *tlsv3.Secret) string {
	return s.GetTlsCertificate().GetCertificateChain().GetInlineString()
}
