package plan

import (
	"bytes"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

func certSecret(name, cert string) *tlsv3.Secret {
	inline := func(s string) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: s}}
	}
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: inline(cert), PrivateKey: inline("KEY-" + cert),
	}}}
}

// TestDiffShowsCertificateChangesWithoutKeys: a rotated certificate is a
// changed secret in the plan, a shared upstream secret is listed once
// (shared section), and no private key reaches the rendered dump.
func TestDiffShowsCertificateChangesWithoutKeys(t *testing.T) {
	out := func(cert string) *xds.Output {
		return &xds.Output{
			Shared: &xds.Resources{Secrets: []*tlsv3.Secret{certSecret("api/cert", "UPSTREAM")}},
			Groups: map[string]*xds.Resources{"edge": {Secrets: []*tlsv3.Secret{certSecret("edge.https/cert/shop", cert)}}},
		}
	}
	running, err := Dump(out("OLD"), "edge", "edge")
	if err != nil {
		t.Fatal(err)
	}
	planned, err := Dump(out("NEW"), "edge", "edge")
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range append(running.Secrets, planned.Secrets...) {
		if strings.Contains(string(raw), "KEY-") {
			t.Fatalf("private key in a plan dump: %s", raw)
		}
	}
	running.Secrets = OnlyGroupSecrets(running.Secrets, out("OLD").Shared)
	planned.Secrets = OnlyGroupSecrets(planned.Secrets, out("NEW").Shared)
	changes, err := Diff(running, planned)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	Render(&buf, "edge:", changes)
	if len(changes) != 1 || changes[0].Action != Modify || changes[0].Kind != "secret" || changes[0].Name != "edge.https/cert/shop" {
		t.Fatalf("changes = %+v\n%s", changes, buf.String())
	}
	same, _ := Diff(running, running)
	if len(same) != 0 {
		t.Fatalf("no-op diff reports %+v", same)
	}
}
