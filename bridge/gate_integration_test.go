package bridge_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestReloadGateChecksTheMeshWorld: a policy whose mesh_routes route
// carries a header value Envoy refuses translates cleanly without
// Consul's mesh data (no sidecar dials api, so the route is in no
// resource) but not with it (web's sidecar dials api over HTTP). The
// reload gate computes the world the daemon serves, mesh included, so the
// reload is rejected with the mesh_routes route's position, and web's
// sidecar keeps its last good 80/20 split. (The gate used to translate
// without the mesh data: the policy was accepted, and web's sidecar
// group then failed at every build.)
func TestReloadGateChecksTheMeshWorld(t *testing.T) {
	agent := consultest.Start(t)
	sidecar := &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}
	for _, reg := range []*api.AgentServiceRegistration{
		{Name: "web", Port: 8080, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Proxy: &api.AgentServiceConnectProxyConfig{Upstreams: []api.Upstream{{DestinationName: "api", LocalBindPort: 9191,
				Config: map[string]any{"protocol": "http"}}}}}}},
		{Name: "api", Port: 9090, Connect: sidecar},
		{Name: "api-canary", Port: 9091, Connect: sidecar},
	} {
		if err := agent.Client().Agent().ServiceRegister(reg); err != nil {
			t.Fatalf("register %s: %v", reg.Name, err)
		}
	}
	file := filepath.Join(t.TempDir(), "policy.hcl")
	good := fmt.Sprintf(meshRoutesHCL, "api-canary")
	if err := os.WriteFile(file, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
	})
	roots, _, err := agent.Client().Connect().CARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	web := proxyService(t, agent, "web-sidecar-proxy")
	upstream := ir.SidecarGroupName(web.Node, "web-sidecar-proxy") + ".upstream.api"
	want := []string{ir.MeshClusterName("api", "dc1", roots.TrustDomain) + "=80", ir.MeshClusterName("api-canary", "dc1", roots.TrustDomain) + "=20"}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: "web-sidecar-proxy", Cluster: "web"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Wait(ctx, func(s adsclient.State) bool { return slices.Equal(weightedRoute(s, upstream), want) }); err != nil {
		t.Fatalf("waiting for the split: %v", err)
	}
	routeVersion := c.Snapshot().Version(adsclient.RouteType)

	// The same split with a header value Envoy refuses, on the route at
	// line 5 of the file.
	bad := strings.Replace(good, "  route {\n", "  route {\n    request_headers {\n      set = { \"x-a\" = \"a\\nb\" }\n    }\n", 1)
	if bad == good {
		t.Fatal("the test's edit did not apply")
	}
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	h.daemon.Reload()
	deadline := time.Now().Add(10 * time.Second)
	for policyStatus(t, h).LastError == nil {
		if time.Now().After(deadline) {
			t.Fatalf("a policy that cannot be served to web's sidecar was accepted; warnings %q, failing groups %v",
				policyStatus(t, h).Warnings, policyStatus(t, h).FailedGroups)
		}
		time.Sleep(50 * time.Millisecond)
	}
	diags := strings.Join(policyStatus(t, h).LastError.Diagnostics, "\n")
	if !strings.Contains(diags, file+":5:3") || !strings.Contains(diags, "cannot be translated") {
		t.Errorf("diagnostics do not name the mesh_routes route at file:line:col: %s", diags)
	}
	if fg := policyStatus(t, h).FailedGroups; len(fg) > 0 {
		t.Errorf("groups failing under the last good policy: %v", fg)
	}
	// The last good policy keeps serving: a new sidecar of the canary is
	// an endpoint change web's sidecar still gets, with its route as it
	// was.
	if err := agent.Client().Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "api-canary-2", Name: "api-canary", Port: 9093, Connect: sidecar}); err != nil {
		t.Fatal(err)
	}
	canary := ir.MeshClusterName("api-canary", "dc1", roots.TrustDomain)
	if _, err := c.Wait(ctx, func(s adsclient.State) bool { return len(s.Endpoints(canary)) == 2 }); err != nil {
		t.Fatalf("the canary's second sidecar did not reach web's sidecar under the last good policy: %v", err)
	}
	if v := c.Snapshot().Version(adsclient.RouteType); v != routeVersion || !slices.Equal(weightedRoute(c.Snapshot(), upstream), want) {
		t.Errorf("web's routes changed under a rejected policy: version %q -> %q, split %v", routeVersion, v, weightedRoute(c.Snapshot(), upstream))
	}
}
