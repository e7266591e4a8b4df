package agent_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	localratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/golden"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// rateLimitWorld is what the central bridge serves the edge group of the
// golden case whose route limits each client (Envoy 1.35's per-client
// buckets) and each partner key.
func rateLimitWorld(t *testing.T) func(string) *xds.Resources {
	t.Helper()
	m, err := golden.ReadModel("../model/testdata/http_local_ratelimit/" + golden.ModelFile)
	if err != nil {
		t.Fatal(err)
	}
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	g := out.Groups["edge"]
	return func(string) *xds.Resources {
		return &xds.Resources{Clusters: out.Shared.Clusters, Endpoints: out.Shared.Endpoints, Listeners: g.Listeners, Routes: g.Routes}
	}
}

// descriptors counts the local rate-limit descriptors in a proxy's routes.
func descriptors(t *testing.T, s adsclient.State) int {
	t.Helper()
	n := 0
	for _, m := range s.Types[adsclient.RouteType].Resources {
		for _, vh := range m.(*routev3.RouteConfiguration).GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				if a := r.GetTypedPerFilterConfig()["envoy.filters.http.local_ratelimit"]; a != nil {
					l := &localratelimitv3.LocalRateLimit{}
					if err := a.UnmarshalTo(l); err != nil {
						t.Fatal(err)
					}
					n += len(l.GetDescriptors())
				}
			}
		}
	}
	return n
}

// TestAgentServesOlderEnvoys: the agent relays a node.cluster once,
// whatever Envoy versions its local proxies run, and serves each what
// its version knows: a local Envoy 1.22 gets no rate-limit descriptors
// (1.33's), an Envoy 1.40 all of them, and the agent's /v1/proxies says
// what the old one misses.
func TestAgentServesOlderEnvoys(t *testing.T) {
	cen := startStandIn(t, nil, rateLimitWorld(t))
	var logs syncbuffer.Buffer
	ag := startAgentWith(t, t.TempDir(), func(c *agent.Config) { c.Upstreams = []string{cen.addr} }, &logs)
	sock := "unix://" + ag.SocketAddr().String()
	proxies := map[string]*adsclient.Client{}
	// The old one first: it connects before the relay has its config.
	for _, n := range []struct{ id, version string }{{"old", "1.22.9"}, {"new", "1.40.0"}} {
		id, version := n.id, n.version
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: sock, NodeID: id, Cluster: "edge-rl", UserAgentVersion: version, Mode: adsclient.Delta})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		proxies[id] = c
	}
	hasRoutes := func(s adsclient.State) bool { return len(s.Types[adsclient.RouteType].Resources) > 0 }
	wait(t, proxies["new"], "the newest's routes", 15*time.Second, hasRoutes)
	wait(t, proxies["old"], "the old one's routes", 15*time.Second, hasRoutes)
	if n := descriptors(t, proxies["new"].Snapshot()); n < 3 {
		t.Errorf("Envoy 1.40 got %d descriptors, want the translation's 3", n)
	}
	if n := descriptors(t, proxies["old"].Snapshot()); n != 0 {
		t.Errorf("Envoy 1.22 got %d descriptors, which it cannot fill", n)
	}
	cen.mu.Lock()
	keys := len(cen.keys)
	cen.mu.Unlock()
	if keys != 1 {
		t.Errorf("the agent fetched %d keys from the central bridge, want edge-rl once", keys)
	}
	resp, err := http.Get("http://" + ag.AdminAddr().String() + "/v1/proxies")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ps []struct {
		NodeID       string   `json:"node_id"`
		EnvoyVersion string   `json:"envoy_version"`
		Downgraded   []string `json:"downgraded"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ps); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		missing := slices.ContainsFunc(p.Downgraded, func(d string) bool { return strings.Contains(d, "local rate-limit descriptors") })
		if p.NodeID == "old" && (p.EnvoyVersion != "1.22" || !missing) || p.NodeID == "new" && (p.EnvoyVersion != "1.40" || len(p.Downgraded) > 0) {
			t.Errorf("/v1/proxies: %+v", p)
		}
	}
	if len(ps) != 2 {
		t.Errorf("/v1/proxies lists %d proxies, want 2", len(ps))
	}
	// The old one is warned about, whether it connected before the relay
	// had its config (then for its node.cluster) or after (for itself).
	eventually(t, 5*time.Second, "a warning naming what the Envoy 1.22 misses", func() bool {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, "local rate-limit descriptors") && strings.Contains(line, "edge-rl") {
				return true
			}
		}
		return false
	})
}

// TestCentralSeesRelayedEnvoys: the central bridge's /v1/proxies shows,
// on the agent's relay stream, the Envoys (and versions) the agent
// relays that node.cluster to; a local Envoy of another version joining
// is reported within seconds (the relay reconnects), while the local
// proxies keep their config.
func TestCentralSeesRelayedEnvoys(t *testing.T) {
	cen := startStandIn(t, nil, rateLimitWorld(t))
	var logs syncbuffer.Buffer
	ag := startAgentWith(t, t.TempDir(), func(c *agent.Config) { c.Upstreams = []string{cen.addr} }, &logs)
	sock := "unix://" + ag.SocketAddr().String()
	dial := func(id, version string) *adsclient.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: sock, NodeID: id, Cluster: "edge-rl", UserAgentVersion: version, Mode: adsclient.Delta})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	relayed := func() []string {
		for _, p := range cen.srv.Proxies() {
			if p.NodeCluster == "edge-rl" {
				return p.RelayedEnvoys
			}
		}
		return nil
	}
	hasRoutes := func(s adsclient.State) bool { return len(s.Types[adsclient.RouteType].Resources) > 0 }
	old := dial("old", "1.22.9")
	wait(t, old, "the old one's routes", 15*time.Second, hasRoutes)
	eventually(t, 15*time.Second, "the central bridge seeing old@1.22", func() bool { return slices.Equal(relayed(), []string{"old@1.22"}) })
	dial("new", "1.40.0")
	eventually(t, 15*time.Second, "the central bridge seeing both", func() bool {
		return slices.Equal(relayed(), []string{"new@1.40", "old@1.22"})
	})
	if !hasRoutes(old.Snapshot()) {
		t.Error("the old Envoy lost its routes while the relay reconnected")
	}
	// The relay sends its node on a stream's first request only
	// (NodeOnFirstMessageOnly); the central still counts every later
	// request, the ACKs, as that stream's: each type it was sent is
	// ACKed at the version sent.
	eventually(t, 15*time.Second, "the central bridge seeing the relay stream synced", func() bool {
		for _, p := range cen.srv.Proxies() {
			if p.NodeCluster == "edge-rl" {
				if len(p.Types) < 4 {
					return false
				}
				for _, ts := range p.Types {
					if ts.VersionSent == "" || ts.VersionAcked != ts.VersionSent {
						return false
					}
				}
				return true
			}
		}
		return false
	})
	for typ, n := range old.Stats().NACKs {
		if n > 0 {
			t.Errorf("the old Envoy NACKed %s %d times", typ, n)
		}
	}
}
