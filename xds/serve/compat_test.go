package serve

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	localratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/golden"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/envoycompat"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
)

// perClientOutput translates the golden case whose edge route limits
// each client (a local rate-limit descriptor without a value, which
// Envoy 1.35 is certain to have) and each partner key.
func perClientOutput(t *testing.T) *xds.Output {
	t.Helper()
	m, err := golden.ReadModel("../../model/testdata/http_local_ratelimit/" + golden.ModelFile)
	if err != nil {
		t.Fatal(err)
	}
	out, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// localLimits counts, in a client's routes, the local rate-limit
// configs of virtual hosts and routes, their descriptors, and those
// without a value (per-client buckets).
func localLimits(t *testing.T, st adsclient.State) (configs, descriptors, perClient int) {
	t.Helper()
	for _, m := range st.Types[resourcev3.RouteType].Resources {
		for _, vh := range m.(*routev3.RouteConfiguration).GetVirtualHosts() {
			pfs := []map[string]*anypb.Any{vh.GetTypedPerFilterConfig()}
			for _, r := range vh.GetRoutes() {
				pfs = append(pfs, r.GetTypedPerFilterConfig())
			}
			for _, pf := range pfs {
				a := pf["envoy.filters.http.local_ratelimit"]
				if a == nil {
					continue
				}
				l := &localratelimitv3.LocalRateLimit{}
				if err := a.UnmarshalTo(l); err != nil {
					t.Fatal(err)
				}
				configs++
				descriptors += len(l.GetDescriptors())
				for _, d := range l.GetDescriptors() {
					if slices.ContainsFunc(d.GetEntries(), func(e *ratelimitv3.RateLimitDescriptor_Entry) bool { return e.GetValue() == "" }) {
						perClient++
					}
				}
			}
		}
	}
	return configs, descriptors, perClient
}

// resolveSame serves node.clusters edge, edge-2, edge-3... as group edge.
func resolveSame(nc string) string { g, _, _ := strings.Cut(nc, "-"); return g }

// TestEnvoyVersionServed: a node claiming the oldest supported Envoy gets
// no field newer than it (the per-client and descriptor buckets of the
// local rate limit go, the route's own bucket stays) and /v1/proxies
// says so; one claiming the newest, or no version, gets everything; the
// proxies of one version class share one rewritten copy.
func TestEnvoyVersionServed(t *testing.T) {
	s := startServer(t, ServerConfig{})
	if _, err := s.Update(context.Background(), perClientOutput(t), resolveSame); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]struct {
		cluster, version string
		downgraded       bool
	}{
		"oldest":      {"edge", "1.22.0", true},
		"oldest-b":    {"edge-2", "1.22.11", true}, // another node.cluster of the group
		"newest":      {"edge", "1.40.1", false},
		"no-version":  {"edge", "", false},
		"below-range": {"edge", "1.21.6", true},
	}
	states := map[string]adsclient.State{}
	for id, n := range nodes {
		c := dial(t, s, adsclient.Config{NodeID: id, Cluster: n.cluster, UserAgentVersion: n.version, InitialFetchTimeout: -1})
		st, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.Types[resourcev3.RouteType].Resources) > 0 })
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		states[id] = st
	}
	for id, n := range nodes {
		configs, descriptors, perClient := localLimits(t, states[id])
		if configs == 0 {
			t.Errorf("%s: no local rate limit at all; the route's own bucket must stay", id)
		}
		p := s.waitStatus(t, id, "RDS", StatusSynced)
		if p.Status != StatusSynced {
			t.Errorf("%s: status %s, want SYNCED", id, p.Status)
		}
		if n.downgraded {
			if descriptors != 0 || perClient != 0 {
				t.Errorf("%s (Envoy %s): served %d descriptors, %d per client; Envoy < 1.33 has no descriptors of its own", id, n.version, descriptors, perClient)
			}
			if !slices.ContainsFunc(p.Downgraded, func(d string) bool { return strings.Contains(d, "local rate-limit descriptors") }) {
				t.Errorf("%s: /v1/proxies downgraded = %q, want the local rate-limit descriptors named", id, p.Downgraded)
			}
			if want := n.version[:4]; p.EnvoyVersion != want {
				t.Errorf("%s: envoy_version = %q, want %q", id, p.EnvoyVersion, want)
			}
			continue
		}
		if perClient == 0 || descriptors < 2 {
			t.Errorf("%s (Envoy %q): served %d descriptors, %d per client; the newest gets them all", id, n.version, descriptors, perClient)
		}
		if len(p.Downgraded) != 0 {
			t.Errorf("%s: downgraded = %q, want nothing", id, p.Downgraded)
		}
	}
	// One rewritten copy for the class: the two node.clusters of the
	// group and the Envoy below the range share the very set.
	s.mu.Lock()
	a, b, c := s.cache.Served("edge\x1e1.22"), s.cache.Served("edge-2\x1e1.22"), s.cache.Served(cache.Key(nodeOf(t, s, "below-range")))
	cur := s.cache.Served("edge")
	newest := s.cache.Served(cache.Key(nodeOf(t, s, "newest")))
	s.mu.Unlock()
	if newest[resourcev3.RouteType] != cur[resourcev3.RouteType] {
		t.Errorf("the newest Envoy is not served the very sets of a node without a version")
	}
	if a == nil || a[resourcev3.RouteType] != b[resourcev3.RouteType] || a[resourcev3.RouteType] != c[resourcev3.RouteType] {
		t.Errorf("the 1.22 class's route sets differ between its keys: not one copy")
	}
	if cur[resourcev3.RouteType] == a[resourcev3.RouteType] || cur[resourcev3.RouteType].Version() == a[resourcev3.RouteType].Version() {
		t.Errorf("the newest Envoys are served the rewritten routes")
	}
	// Another node.cluster of the group and class: served from the
	// class's copy, nothing examined again.
	before := envoycompat.Rewrites()
	c3 := dial(t, s, adsclient.Config{NodeID: "oldest-c", Cluster: "edge-3", UserAgentVersion: "1.22.4", InitialFetchTimeout: -1})
	if _, err := c3.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.Types[resourcev3.RouteType].Resources) > 0 }); err != nil {
		t.Fatal(err)
	}
	if n := envoycompat.Rewrites() - before; n != 0 {
		t.Errorf("a third 1.22 node.cluster made %d resources be rewritten again", n)
	}
	// What needs no rewrite is shared, not copied: endpoints.
	if ea, ec := a[resourcev3.EndpointType].Entries(), cur[resourcev3.EndpointType].Entries(); len(ea) == 0 || ea[0].Resource() != ec[0].Resource() {
		t.Errorf("endpoints were copied for the old class")
	}
}

// nodeOf is the node a connected proxy announced.
func nodeOf(t *testing.T, s *testServer, id string) *corev3.Node {
	t.Helper()
	s.tracker.mu.Lock()
	defer s.tracker.mu.Unlock()
	for _, st := range s.tracker.streams {
		if st.node.GetId() == id {
			return st.node
		}
	}
	t.Fatalf("%s is not connected", id)
	return nil
}

// TestOldEnvoyWarnedOncePerNode: the log says once per node that its
// Envoy is served a rewritten copy, and what it misses; the newest
// Envoys are not mentioned. /v1/proxies names a version below the range.
func TestOldEnvoyWarnedOncePerNode(t *testing.T) {
	var logs syncbuffer.Buffer
	s := startServerLogging(t, ServerConfig{}, &logs)
	if _, err := s.Update(context.Background(), perClientOutput(t), resolveSame); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the same node again: no second warning
		for _, n := range []struct{ id, version string }{{"old", "1.22.3"}, {"new", "1.40.0"}, {"ancient", "1.20.1"}} {
			c := dial(t, s, adsclient.Config{NodeID: n.id, Cluster: "edge", UserAgentVersion: n.version, InitialFetchTimeout: -1})
			if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.Types[resourcev3.RouteType].Resources) > 0 }); err != nil {
				t.Fatal(err)
			}
			if i == 0 && n.id == "ancient" {
				if p := s.proxy("ancient"); p == nil || len(p.Downgraded) == 0 || !strings.Contains(p.Downgraded[0], "older than the oldest supported") {
					t.Errorf("/v1/proxies of an Envoy 1.20: %+v", p)
				}
			}
			_ = c.Close()
		}
	}
	out := logs.String()
	for node, want := range map[string]int{"old": 1, "ancient": 1, "new": 0} {
		if got := strings.Count(out, `"node":"`+node+`","group":"edge","envoy_version"`); got != want {
			t.Errorf("%d warnings about node %s, want %d:\n%s", got, node, want, out)
		}
	}
	if !strings.Contains(out, "local rate-limit descriptors") {
		t.Errorf("the warning does not say what the node misses:\n%s", out)
	}
}

// TestOldSidecarKeepsItsStatus: a Connect sidecar running an older Envoy
// is keyed by its node id as any sidecar, and /v1/proxies shows its
// sidecar status with its version.
func TestOldSidecarKeepsItsStatus(t *testing.T) {
	s := startServer(t, ServerConfig{Sidecars: true})
	if _, err := s.Update(context.Background(), sidecarOutput(t), resolveSidecars); err != nil {
		t.Fatal(err)
	}
	s.SetSidecars(map[string][]SidecarInfo{"web-sidecar-proxy": {webInfo}})
	c := dial(t, s, adsclient.Config{NodeID: "web-sidecar-proxy", Cluster: "edge", UserAgentVersion: "1.22.2", InitialFetchTimeout: -1})
	st, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(listenerPorts(st)) > 0 })
	if err != nil {
		t.Fatal(err)
	}
	if got := listenerPorts(st); len(got) != 1 || got[0] != 21000 {
		t.Fatalf("listener ports = %v, want the sidecar's [21000]", got)
	}
	p := s.waitStatus(t, "web-sidecar-proxy", "LDS", StatusSynced)
	if p.Group != webSidecar || p.Sidecar == nil || p.Sidecar.Service != "web" || p.EnvoyVersion != "1.22" || p.Status != StatusSynced {
		t.Fatalf("/v1/proxies entry = %+v", p)
	}
}

// TestOldEnvoyWarnedWhenPolicyNeedsMore: an Envoy 1.22 that connected
// while nothing it was served needed a newer Envoy is warned about once
// a policy starts using a newer feature, and only then.
func TestOldEnvoyWarnedWhenPolicyNeedsMore(t *testing.T) {
	var logs syncbuffer.Buffer
	s := startServerLogging(t, ServerConfig{}, &logs)
	s.update(t, testOutput(t, []string{"web"}, 8080))
	c := dial(t, s, adsclient.Config{NodeID: "old", Cluster: "edge", UserAgentVersion: "1.22.1", InitialFetchTimeout: -1})
	if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.Types[resourcev3.ListenerType].Resources) > 0 }); err != nil {
		t.Fatal(err)
	}
	if p := s.proxy("old"); p == nil || len(p.Downgraded) != 0 || strings.Contains(logs.String(), `"level":"warn"`) {
		t.Fatalf("nothing newer served yet, but: %+v\n%s", p, logs.String())
	}
	if _, err := s.Update(context.Background(), perClientOutput(t), resolveSame); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "now miss more"); n != 1 {
		t.Errorf("%d warnings that the proxies of edge now miss more, want 1:\n%s", n, logs.String())
	}
	if _, err := s.Update(context.Background(), perClientOutput(t), resolveSame); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "now miss more"); n != 1 {
		t.Errorf("warned again for the same policy:\n%s", logs.String())
	}
}

// TestOldEnvoyWarnedWhenConnectedBeforeSync: an Envoy 1.22 that connects
// before the bridge has anything to serve is warned about (for its
// node.cluster) once it is served what it misses.
func TestOldEnvoyWarnedWhenConnectedBeforeSync(t *testing.T) {
	var logs syncbuffer.Buffer
	s := startServerLogging(t, ServerConfig{}, &logs)
	c := dial(t, s, adsclient.Config{NodeID: "early", Cluster: "edge", UserAgentVersion: "1.22.1", InitialFetchTimeout: -1})
	eventually(t, "the early node to be known", func() bool { return s.proxy("early") != nil }, func() string { return logs.String() })
	if _, err := s.Update(context.Background(), perClientOutput(t), resolveSame); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.Types[resourcev3.RouteType].Resources) > 0 }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "now miss more") || !strings.Contains(logs.String(), "local rate-limit descriptors") {
		t.Errorf("no warning for the early Envoy 1.22:\n%s", logs.String())
	}
}
