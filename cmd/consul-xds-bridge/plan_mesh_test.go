package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// TestPlanWithTheMesh: plan reads Consul's mesh (sidecar registrations,
// intentions) as the daemon does, so the running mesh policy plans to no
// changes, and a changed default intention shows as a change of the
// sidecars' public listeners and nothing else.
func TestPlanWithTheMesh(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterWebAPIMesh(t)
	if _, _, err := agent.Client().ConfigEntries().Set(&api.ServiceIntentionsConfigEntry{Kind: api.ServiceIntentions, Name: "api",
		Sources: []*api.SourceIntention{{Name: "web", Action: api.IntentionActionAllow}}}, nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := "consul {\n  address = \"" + agent.HTTPAddr() + "\"\n}\nmesh {\n  default_intention = \"allow\"\n}\n"
	file := filepath.Join(dir, "config.hcl")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	admin := runBridge(t, file)

	var out, errOut bytes.Buffer
	if code := realMain([]string{"plan", "-config", file, "-admin", admin}, &out, &errOut); code != 0 {
		t.Fatalf("plan of the running mesh policy: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	// Nodes in no group, proxyless clients, one section per registered
	// sidecar.
	if got := strings.Count(out.String(), "No changes."); got != 4 {
		t.Fatalf("want 4 sections without changes (no group, proxyless, two sidecars):\n%s", out.String())
	}

	edited := filepath.Join(dir, "edited.hcl")
	if err := os.WriteFile(edited, []byte(strings.Replace(src, `"allow"`, `"deny"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	if code := realMain([]string{"plan", "-config", edited, "-admin", admin}, &out, &errOut); code != 2 {
		t.Fatalf("plan of a default deny: exit %d, want 2\n%s%s", code, out.String(), errOut.String())
	}
	// web's public listener now denies everyone; api's still allows web
	// but its RBAC changes shape with the default.
	for _, want := range []string{"~ listener  sidecar:", "web-sidecar-proxy.public", "api-sidecar-proxy.public"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "upstream") {
		t.Errorf("a default intention change must not touch upstream listeners:\n%s", out.String())
	}
}

// TestPlanWithMeshRoutes: plan reads the connect health of mesh_routes
// targets as the daemon does, so a running policy splitting web's
// upstream api to api-canary (which no sidecar dials) plans to no
// changes, and dropping the split changes web's upstream route only.
func TestPlanWithMeshRoutes(t *testing.T) {
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
	dir := t.TempDir()
	src := "consul {\n  address = \"" + agent.HTTPAddr() + "\"\n}\nmesh {\n  default_intention = \"allow\"\n}\n" +
		"mesh_routes \"api\" {\n  route {\n    split {\n      service = \"api\"\n      weight = 80\n    }\n    split {\n      service = \"api-canary\"\n      weight = 20\n    }\n  }\n}\n"
	file := filepath.Join(dir, "config.hcl")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	admin := runBridge(t, file)

	var out, errOut bytes.Buffer
	if code := realMain([]string{"plan", "-config", file, "-admin", admin}, &out, &errOut); code != 0 {
		t.Fatalf("plan of the running mesh_routes policy: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	if got := strings.Count(out.String(), "No changes."); got != 5 {
		t.Fatalf("want 5 sections without changes (no group, proxyless, three sidecars):\n%s", out.String())
	}

	edited := filepath.Join(dir, "edited.hcl")
	if err := os.WriteFile(edited, []byte(src[:strings.Index(src, "mesh_routes")]), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	if code := realMain([]string{"plan", "-config", edited, "-admin", admin}, &out, &errOut); code != 2 {
		t.Fatalf("plan without the split: exit %d, want 2\n%s%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "web-sidecar-proxy.upstream.api") || strings.Contains(out.String(), ".public") {
		t.Errorf("plan output should change web's upstream route only:\n%s", out.String())
	}
	t.Logf("plan without the split:\n%s", out.String())
}
