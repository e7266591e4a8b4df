package bridge_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/policytest"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// TestNamesIgnoreWhereThePolicyComesFrom: resource names derive from the
// policy's identity, never from where it is read. The same policy read
// from a file, from a KV key (its consul:KEY location), and with a comment
// line added, translates to byte-identical resources, so replicas agree,
// plan shows no phantom changes and a comment edit pushes nothing.
func TestNamesIgnoreWhereThePolicyComesFrom(t *testing.T) {
	src, err := os.ReadFile("../examples/policies/edge-gateway.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cat, err := consul.ReadFixtureFile("../examples/policies/edge-gateway.catalog.json")
	if err != nil {
		t.Fatal(err)
	}
	var lastSources map[string]string
	render := func(name string, src []byte) []byte {
		t.Helper()
		cfg := policytest.Config(t, name, src)
		m, _ := model.Build(cat, cfg.Policy)
		out, err := xds.Translate(m)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		lastSources = out.Groups["edge"].RouteSources
		var b bytes.Buffer
		for _, r := range out.Groups["edge"].Routes {
			j, err := xds.MarshalResource(r)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(j)
		}
		for _, l := range out.Groups["edge"].Listeners {
			j, _ := xds.MarshalResource(l)
			b.Write(j)
		}
		return b.Bytes()
	}
	want := render("/etc/consul-xds-bridge/edge-gateway.hcl", src)
	wantSources := lastSources
	if len(wantSources) == 0 {
		t.Fatal("no route sources: the config dump could not say where a route is declared")
	}
	for name, variant := range map[string]struct {
		file string
		src  []byte
	}{
		"other path":    {"/srv/policies/gateway.hcl", src},
		"KV key":        {"consul:xds-bridge/policy/edge", src},
		"comment added": {"/etc/consul-xds-bridge/edge-gateway.hcl", append([]byte("# reviewed by ops\n\n"), src...)},
	} {
		if got := render(variant.file, variant.src); !bytes.Equal(got, want) {
			t.Errorf("%s: the edge group's listeners and routes differ", name)
		}
		// Where each route is declared is still known, beside the
		// resources: the comment moved every route two lines down.
		for route, src := range lastSources {
			if !strings.HasPrefix(src, variant.file+":") {
				t.Errorf("%s: route %s declared at %q, want in %s", name, route, src, variant.file)
			}
			if name == "comment added" && src == wantSources[route] {
				t.Errorf("%s: route %s still at %q after two lines were added above it", name, route, src)
			}
		}
	}
}
