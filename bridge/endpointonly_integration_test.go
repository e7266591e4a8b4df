package bridge_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestHealthFlipTakesTheEndpointOnlyPath: against a real Consul, a TTL
// check flipping is built by the endpoint-only path (issue 40) and
// reaches the proxies, while a registration, which adds an instance, is
// built whole; the logs' "snapshot updated" says which.
func TestHealthFlipTakesTheEndpointOnlyPath(t *testing.T) {
	agent := consultest.Start(t)
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	for i := 1; i <= 3; i++ {
		agent.RegisterTTL(t, "web", fmt.Sprintf("web-%d", i), 1000+i, nil, nil)
	}
	logs := &syncbuffer.Buffer{}
	h := startBridgeWith(t, agent, fwd, func(c *bridge.Config) {
		c.Logger = zerolog.New(zerolog.MultiLevelWriter(logs, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel)
	})
	delta := dial(t, h, adsclient.Delta, nil)
	waitEndpoints(t, "web", join(ep(1001, "HEALTHY"), ep(1002, "HEALTHY"), ep(1003, "HEALTHY")), delta)

	// paths lists endpoint_only_path of the builds logged after mark.
	paths := func(mark int) []bool {
		var out []bool
		for _, line := range strings.Split(logs.String()[mark:], "\n") {
			var ev map[string]any
			if json.Unmarshal([]byte(line), &ev) == nil && ev["message"] == "snapshot updated" {
				b, _ := ev["endpoint_only_path"].(bool)
				out = append(out, b)
			}
		}
		return out
	}

	// A build logs after its Update has pushed, so a client can hold a
	// build's result before its log line is written: wait for the lines.
	logged := func(mark int, done func([]bool) bool) []bool {
		t.Helper()
		var got []bool
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if got = paths(mark); done(got) || time.Now().After(deadline) {
				return got
			}
		}
	}
	logged(0, func(got []bool) bool { return len(got) > 0 })

	mark := len(logs.String())
	agent.SetTTL(t, "service:web-2", "critical")
	waitEndpoints(t, "web", join(ep(1001, "HEALTHY"), ep(1002, "UNHEALTHY"), ep(1003, "HEALTHY")), delta)
	if got := logged(mark, func(got []bool) bool { return slices.Contains(got, true) }); !slices.Contains(got, true) {
		t.Fatalf("the health flip's builds took the endpoint-only path: %v, want a true", got)
	}

	mark = len(logs.String())
	agent.RegisterTTL(t, "web", "web-4", 1004, nil, nil)
	waitEndpoints(t, "web", join(ep(1001, "HEALTHY"), ep(1002, "UNHEALTHY"), ep(1003, "HEALTHY"), ep(1004, "HEALTHY")), delta)
	if got := logged(mark, func(got []bool) bool { return len(got) > 0 }); len(got) == 0 || slices.Contains(got, true) {
		t.Fatalf("a new instance's builds took the endpoint-only path: %v, want none", got)
	}
}
