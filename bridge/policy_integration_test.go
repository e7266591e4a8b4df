package bridge_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

const filePolicy = `
service "api" {
  connect_timeout = "1s"
  subset "v2" {
    tags = ["v2"]
  }
}

proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "shop" {
      domains = ["*"]
      route {
        match {
          path_prefix = "/api/"
        }
        split {
          service = "api"
          weight  = 90
        }
        split {
          service = "api"
          subset  = "v2"
          weight  = 10
        }
        timeout = "3s"
      }
    }
  }
}
`

// kvPolicy gives the sidecar group a route whose prefix the test edits.
func kvPolicy(prefix string) string {
	return `
proxy "sidecar-*" {
  listener "outbound" {
    address = "127.0.0.1"
    port    = 9001
    virtual_host "web" {
      route {
        match {
          path_prefix = "` + prefix + `"
        }
        service = "web"
      }
    }
  }
}
`
}

func loadPolicy(t *testing.T, files ...string) *policy.Policy {
	t.Helper()
	cfg, _, diags := policy.LoadFiles(files...)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return cfg.Policy
}

func routePrefixes(rc *routev3.RouteConfiguration) []string {
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			out = append(out, r.GetMatch().GetPrefix())
		}
	}
	return out
}

func policyStatus(t *testing.T, h *harness) bridge.PolicyStatus {
	t.Helper()
	resp, err := adminGet("http://" + h.daemon.AdminAddr().String() + "/v1/policy")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st bridge.PolicyStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestPolicyFromFileAndKV follows the routing-policy acceptance: policy from
// a file and from KV reaches the right proxy groups; KV and file edits
// apply without a restart; an invalid KV document changes nothing and is
// reported; restoring a valid one recovers.
func TestPolicyFromFileAndKV(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "api", "api-1", 2001, []string{"v1"}, nil)
	agent.RegisterTTL(t, "api", "api-2", 2002, []string{"v2"}, nil)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	const prefix = "xds-bridge/policy/"
	kv := agent.Client().KV()
	put := func(key, val string) {
		t.Helper()
		if _, err := kv.Put(&api.KVPair{Key: prefix + key, Value: []byte(val)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("sidecars.hcl", kvPolicy("/"))

	dir := t.TempDir()
	file := filepath.Join(dir, "policy.hcl")
	if err := os.WriteFile(file, []byte(filePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	h := startBridgeWith(t, agent, fwd, func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
		c.Settings.Consul.KVPrefix = prefix
	})
	edge := dialAs(t, h, adsclient.SotW, "edge", nil)
	sidecar := dialAs(t, h, adsclient.Delta, "sidecar-web-1", nil)
	other := dialAs(t, h, adsclient.SotW, "unrelated", nil)

	wait := func(c *adsclient.Client, what string, pred func(adsclient.State) bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if _, err := c.Wait(ctx, pred); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	wait(edge, "edge.http listener and routes", func(s adsclient.State) bool {
		return slices.Equal(s.ListenerNames(), []string{"edge.http"}) && s.RouteConfig("edge.http") != nil
	})
	st := edge.Snapshot()
	wc := st.RouteConfig("edge.http").GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetWeightedClusters().GetClusters()
	if len(wc) != 2 || wc[0].GetName() != "api" || wc[0].GetWeight().GetValue() != 90 || wc[1].GetName() != "api.v2" || wc[1].GetWeight().GetValue() != 10 {
		t.Fatalf("edge route split = %v", wc)
	}
	if eps := st.Endpoints("api.v2"); len(eps) != 1 || !strings.HasSuffix(eps[0].Address, ":2002") {
		t.Fatalf("subset api.v2 endpoints = %v, want only api-2", eps)
	}
	// Each group holds only the clusters its own routes reach: web,
	// routed to from the KV policy's sidecars, is theirs, not edge's.
	if slices.Contains(st.ClusterNames(), "web") {
		t.Fatalf("edge holds web, which only the sidecars route to: %v", st.ClusterNames())
	}
	wait(sidecar, "sidecar listener from KV (glob group) and its cluster", func(s adsclient.State) bool {
		return slices.Equal(s.ListenerNames(), []string{"sidecar-*.outbound"}) && slices.Contains(s.ClusterNames(), "web")
	})
	if names := other.Snapshot().ListenerNames(); len(names) != 0 {
		t.Fatalf("a node in no group got listeners: %v", names)
	}
	// /v1/policy says where each served route is declared, file or KV.
	// The status follows the fan-out that served the build (it describes
	// what is served), so a proxy may hold the routes a moment before
	// /v1/policy names them: poll briefly.
	var srcs map[string]string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		srcs = policyStatus(t, h).RouteSources
		ok := strings.HasPrefix(srcs["edge.http/shop/0"], file+":") && strings.HasPrefix(srcs["sidecar-*.outbound/web/0"], prefix+"sidecars.hcl:")
		if ok || time.Now().After(deadline) {
			if !ok {
				t.Errorf("route_sources = %v, want edge.http's routes in %s and the sidecars' in KV", srcs, file)
			}
			break
		}
	}

	// A KV edit reaches the proxy quickly and without a restart.
	start := time.Now()
	put("sidecars.hcl", kvPolicy("/v2/"))
	wait(sidecar, "edited KV route", func(s adsclient.State) bool {
		return slices.Equal(routePrefixes(s.RouteConfig("sidecar-*.outbound")), []string{"/v2/"})
	})
	t.Logf("KV edit reached the proxy in %v", time.Since(start))
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("KV edit took %v; want about a second", d)
	}

	// An invalid KV document changes nothing and is reported.
	versionBefore := sidecar.Snapshot().Version(adsclient.RouteType)
	routesBefore := sidecar.Stats().Responses[adsclient.RouteType]
	put("broken.hcl", `proxy "x" { listener "l" { port = "not a number" } }`)
	deadline := time.Now().Add(10 * time.Second)
	for policyStatus(t, h).LastError == nil {
		if time.Now().After(deadline) {
			t.Fatal("invalid KV document not reported on /v1/policy")
		}
		time.Sleep(50 * time.Millisecond)
	}
	st2 := policyStatus(t, h)
	if !strings.Contains(strings.Join(st2.LastError.Diagnostics, "\n"), "broken.hcl:1:") {
		t.Fatalf("diagnostics do not name the KV key with a position: %v", st2.LastError.Diagnostics)
	}
	time.Sleep(500 * time.Millisecond)
	if got := sidecar.Stats().Responses[adsclient.RouteType]; got != routesBefore {
		t.Fatalf("proxy got %d new route responses after an invalid policy", got-routesBefore)
	}
	if v := sidecar.Snapshot().Version(adsclient.RouteType); v != versionBefore {
		t.Fatalf("route version changed after an invalid policy: %q -> %q", versionBefore, v)
	}

	// Fixing it recovers; the file policy keeps serving throughout.
	put("broken.hcl", `service "web" { connect_timeout = "2s" }`)
	wait(sidecar, "recovered policy applies", func(s adsclient.State) bool {
		return s.Cluster("web").GetConnectTimeout().AsDuration() == 2*time.Second
	})
	if policyStatus(t, h).LastError != nil {
		t.Fatal("last error not cleared after a good reload")
	}

	// A file edit reloads too (fsnotify).
	if err := os.WriteFile(file, []byte(strings.Replace(filePolicy, `timeout = "3s"`, `timeout = "7s"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	wait(edge, "file edit applies", func(s adsclient.State) bool {
		rc := s.RouteConfig("edge.http")
		return rc != nil && rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetTimeout().AsDuration() == 7*time.Second
	})
}

// TestUntranslatablePolicyIsRejected: a KV document that parses and
// validates but describes resources Envoy refuses (a header value with a
// newline) is rejected whole at reload, with its consul:KEY:line:col, on
// /v1/policy and in the failed-reload metric, and health changes keep
// reaching proxies under the last good policy. (It used to be accepted
// and every later translation failed, freezing every proxy.)
func TestUntranslatablePolicyIsRejected(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	agent.RegisterTTL(t, "web", "web-2", 1002, nil, nil)
	const prefix = "xds-bridge/policy/"
	kv := agent.Client().KV()
	put := func(key, val string) {
		t.Helper()
		if _, err := kv.Put(&api.KVPair{Key: prefix + key, Value: []byte(val)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("sidecars.hcl", kvPolicy("/"))
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	h := startBridgeWith(t, agent, fwd, func(c *bridge.Config) { c.Settings.Consul.KVPrefix = prefix })
	sidecar := dialAs(t, h, adsclient.Delta, "sidecar-web-1", nil)
	waitEndpoints(t, "web", join(ep(1001, "HEALTHY"), ep(1002, "HEALTHY")), sidecar)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := sidecar.Wait(ctx, func(s adsclient.State) bool { return s.RouteConfig("sidecar-*.outbound") != nil }); err != nil {
		t.Fatal(err)
	}
	routeVersion := sidecar.Snapshot().Version(adsclient.RouteType)

	put("sidecars.hcl", strings.Replace(kvPolicy("/"), `service = "web"`, "service = \"web\"\n        request_headers {\n          set = { \"x-a\" = \"a\\nb\" }\n        }", 1))
	deadline := time.Now().Add(10 * time.Second)
	for policyStatus(t, h).LastError == nil {
		if time.Now().After(deadline) {
			t.Fatal("untranslatable policy not reported on /v1/policy")
		}
		time.Sleep(50 * time.Millisecond)
	}
	diags := strings.Join(policyStatus(t, h).LastError.Diagnostics, "\n")
	if !strings.Contains(diags, prefix+"sidecars.hcl:7:7") || !strings.Contains(diags, "cannot be translated") {
		t.Errorf("diagnostics do not name the route at consul:KEY:line:col: %s", diags)
	}
	_, body := get(t, "http://"+h.daemon.AdminAddr().String()+"/metrics")
	if got := metricValue(body, `consul_xds_bridge_policy_reloads_total{result="failed"}`); got < 1 {
		t.Errorf("failed reloads = %v, want at least 1", got)
	}
	agent.SetTTL(t, "service:web-2", "critical")
	waitEndpoints(t, "web", join(ep(1001, "HEALTHY"), ep(1002, "UNHEALTHY")), sidecar)
	if v := sidecar.Snapshot().Version(adsclient.RouteType); v != routeVersion {
		t.Errorf("routes changed under a rejected policy: %q -> %q", routeVersion, v)
	}
}
