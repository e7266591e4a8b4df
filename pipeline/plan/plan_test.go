package plan

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
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

// TestDiffEndpointsAddAndRemove: a health change shows as endpoint counts
// (an omitted health_status counts as healthy, as Envoy treats UNKNOWN),
// and clusters that appear or go are Add and Remove.
func TestDiffEndpointsAddAndRemove(t *testing.T) {
	cla := func(name string, health ...corev3.HealthStatus) *endpointv3.ClusterLoadAssignment {
		var lbs []*endpointv3.LbEndpoint
		for _, h := range health {
			lbs = append(lbs, &endpointv3.LbEndpoint{HealthStatus: h})
		}
		return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: lbs}}}
	}
	dump := func(r *xds.Resources) *xds.ConfigDump {
		t.Helper()
		d, err := Dump(&xds.Output{Shared: r, Groups: map[string]*xds.Resources{}}, "", "")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	running := dump(&xds.Resources{
		Clusters:  []*clusterv3.Cluster{{Name: "api"}, {Name: "old"}},
		Endpoints: []*endpointv3.ClusterLoadAssignment{cla("api", corev3.HealthStatus_HEALTHY, corev3.HealthStatus_UNHEALTHY)},
	})
	planned := dump(&xds.Resources{
		Clusters: []*clusterv3.Cluster{{Name: "api"}, {Name: "new"}},
		Endpoints: []*endpointv3.ClusterLoadAssignment{cla("api", corev3.HealthStatus_UNKNOWN, corev3.HealthStatus_HEALTHY,
			corev3.HealthStatus_DRAINING)},
	})
	changes, err := Diff(running, planned)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, fmt.Sprintf("%s %s %s %s", c.Action, c.Kind, c.Name, c.Detail))
	}
	want := []string{
		fmt.Sprintf("%s cluster new ", Add),
		fmt.Sprintf("%s cluster old ", Remove),
		fmt.Sprintf("%s endpoints api 2 → 3 endpoints (1 → 2 healthy)", Modify),
	}
	if !slices.Equal(got, want) {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDiffSaysWhereChangedRoutesAreDeclared: a changed route
// configuration names where its routes are in the policy, which route
// names (virtual host and position) do not say.
func TestDiffSaysWhereChangedRoutesAreDeclared(t *testing.T) {
	dump := func(prefix string) *xds.ConfigDump {
		t.Helper()
		rc := &routev3.RouteConfiguration{Name: "edge.http", VirtualHosts: []*routev3.VirtualHost{{Name: "shop", Domains: []string{"*"},
			Routes: []*routev3.Route{{Name: "shop/0", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}}}}}}}
		group := &xds.Resources{Routes: []*routev3.RouteConfiguration{rc}, RouteSources: map[string]string{"edge.http/shop/0": "edge.hcl:12:7"}}
		d, err := Dump(&xds.Output{Shared: &xds.Resources{}, Groups: map[string]*xds.Resources{"edge": group}}, "edge", "edge")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	changes, err := Diff(dump("/"), dump("/v2/"))
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0].Action != Modify || changes[0].Detail != "routes at edge.hcl:12:7" {
		t.Errorf("changes = %+v, want the route configuration changed, with its routes' location", changes)
	}
}
