package agent_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// bigListenerPolicy writes a policy whose group edge-big has one listener
// of about n MB: 5n JWT providers, each with a key set file of ~200 KB
// (under the 256 KiB a JWKS file may have) that the bridge inlines into
// the listener.
func bigListenerPolicy(t *testing.T, mb int) string {
	t.Helper()
	dir := t.TempDir()
	n := 5 * mb
	key := base64.RawURLEncoding.EncodeToString(make([]byte, 150<<10)) // ~200 KB of text
	var hcl strings.Builder
	hcl.WriteString("proxy \"edge-big\" {\n  listener \"http\" {\n    port = 8080\n")
	for i := range n {
		file := filepath.Join(dir, fmt.Sprintf("jwks-%d.json", i))
		if err := os.WriteFile(file, []byte(`{"keys":[{"kty":"oct","kid":"k`+fmt.Sprint(i)+`","k":"`+key+`"}]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&hcl, "    jwt_provider \"p%d\" {\n      issuer = \"https://p%d.example\"\n      jwks_file = %q\n    }\n", i, i, file)
	}
	hcl.WriteString("    virtual_host \"all\" {\n      domains = [\"*\"]\n")
	for i := range n {
		fmt.Fprintf(&hcl, "      route {\n        match {\n          path_prefix = \"/p%d/\"\n        }\n        service = \"web\"\n        jwt {\n          provider = \"p%d\"\n        }\n      }\n", i, i)
	}
	hcl.WriteString("      route {\n        service = \"web\"\n      }\n    }\n  }\n}\n")
	file := filepath.Join(dir, "policy.hcl")
	if err := os.WriteFile(file, []byte(hcl.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestAgentRelaysFiveMBListenerFromTheBridge (issue 36, 6): the central
// bridge (real Consul, real policy) serves group edge-big a listener of
// over 5 MB; through the agent's socket a new proxy gets it, its
// endpoints and then a health flip, /readyz is ready and the agent does
// not reconnect. Before max_message_size the agent's upstream stream died
// on every listener response (gRPC's 4 MiB receive default).
func TestAgentRelaysFiveMBListenerFromTheBridge(t *testing.T) {
	ca := consultest.Start(t)
	ca.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	ca.SetTTL(t, "service:web-1", "passing")
	_, central := startCentralWithPolicy(t, ca, bigListenerPolicy(t, 6))

	ag := startAgent(t, t.TempDir(), central)
	proxy := dial(t, "unix://"+ag.SocketAddr().String(), "edge-big", adsclient.Delta)
	wait(t, proxy, "the big listener and web's endpoints through the agent", 60*time.Second, func(s adsclient.State) bool {
		return s.Listener("edge-big.http") != nil && health(s, "web") == "127.0.0.1:1001=HEALTHY"
	})
	got, err := proxy.Wait(context.Background(), func(adsclient.State) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if n := protoSize(got.Listener("edge-big.http")); n < 5<<20 {
		t.Fatalf("the listener is %d bytes; the test needs it over 5 MiB", n)
	}
	ca.SetTTL(t, "service:web-1", "critical")
	wait(t, proxy, "a health flip after it", 30*time.Second, func(s adsclient.State) bool { return health(s, "web") == "127.0.0.1:1001=UNHEALTHY" })
	if body := readyz(t, ag); !strings.Contains(body, `"status":"ready"`) {
		t.Errorf("/readyz: %s", body)
	}
	if n := metricValue(t, ag, "consul_xds_bridge_agent_upstream_reconnects_total"); n != 0 {
		t.Errorf("the agent reconnected %v times", n)
	}
	if rss := rssBytes(); rss > 1<<30 {
		t.Errorf("test process RSS %d MiB", rss>>20)
	}
}

func protoSize(m proto.Message) int { return proto.Size(m) }
