package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// TestRelayedLeafNeverWrittenToDataDir: a leaf-named secret the central
// bridge relays (its private key with it) is neither served to a local
// proxy nor written to data_dir: the relay used to persist what it held,
// the leaf included, and only drop it from what it served (security.md).
func TestRelayedLeafNeverWrittenToDataDir(t *testing.T) {
	const secretKey = "RELAYED-PRIVATE-KEY-OF-API-LEAF"
	world := func(group string) *xds.Resources {
		r := bigWorld(10, 1001)(group)
		ads := &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}
		r.Secrets = []*tlsv3.Secret{{Name: agent.LeafSecretPrefix + "api", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "chain"}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: secretKey}}}}}}
		tc, err := anypb.New(&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: agent.LeafSecretPrefix + "api", SdsConfig: ads}}}})
		if err != nil {
			panic(err)
		}
		r.Clusters[0].TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tc}}
		return r
	}
	cen := startStandIn(t, nil, world)
	dir := t.TempDir()
	ag := startAgent(t, dir, cen.addr)
	ans := askSecrets("unix://"+ag.SocketAddr().String(), "p", "edge-x", []string{agent.LeafSecretPrefix + "api"}, 3*time.Second)
	if len(ans.Got) != 0 {
		t.Fatalf("served a relayed leaf: %+v", ans)
	}
	ag.stop() // flushes pending saves
	files, _ := filepath.Glob(filepath.Join(dir, "data", "node-*.pb"))
	if len(files) == 0 {
		t.Fatal("nothing saved")
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), secretKey) {
			t.Errorf("%s holds the relayed leaf's private key (%q): written to data_dir", f, secretKey)
		}
	}
}
