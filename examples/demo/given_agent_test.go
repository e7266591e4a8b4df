package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
)

// agentServiceIDs lists the service IDs registered on the agent.
func agentServiceIDs(t *testing.T, c *api.Client) []string {
	t.Helper()
	services, err := c.Agent().Services()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for id := range services {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// waitOutput waits until the demo has printed want.
func waitOutput(t *testing.T, cmd interface{ Signal(os.Signal) error }, out *syncbuffer.Buffer, want string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); !strings.Contains(out.String(), want); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) || cmd.Signal(syscall.Signal(0)) != nil {
			t.Fatalf("the demo did not print %q:\n%s", want, out.String())
		}
	}
}

// adminJSON GETs an admin API path with the bearer token into v.
func adminJSON(admin, token, path string, v any) error {
	req, err := http.NewRequest(http.MethodGet, "http://"+admin+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %s %s", path, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// eventually polls cond until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(within); ; time.Sleep(200 * time.Millisecond) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, within, last)
		}
	}
}

// TestDemoUsesTheAgentItIsGiven: `go run ./examples/demo -consul
// HOST:PORT` (README, Quick start) uses that Consul agent, whatever the
// config's consul.address says; refuses to start, registering nothing,
// while one of the demo's service IDs is taken there; and on exit
// deregisters exactly what it registered: an instance of "web" that
// someone else registered there beforehand survives. While it runs, its
// proxyless gRPC client is a SYNCED proxy on the admin API (with the
// token from the file the demo names), and `curl <backend>/fail` turns
// that backend's endpoint UNHEALTHY in what EDS serves (the console's
// Catalog page: /v1/catalog), `/recover` HEALTHY again.
func TestDemoUsesTheAgentItIsGiven(t *testing.T) {
	// The demo's lock and the bridge's generated admin token stay in
	// this test's directories (another demo on the machine is not ours).
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("STATE_DIRECTORY", "")
	theirs := consultest.Start(t)
	client := theirs.Client()
	demo, bridge := buildDemo(t)
	admin := freeAddr(t)
	// The config names a Consul where nothing listens: -consul wins.
	cfg := demoConfig(t, "127.0.0.1:1", freeAddr(t), admin)
	args := []string{"-consul", theirs.HTTPAddr(), "-consul-bin", "/nonexistent/consul", "-bridge", bridge, "-config", cfg}

	// Someone else's instance of web, and (for now) an api-2 of theirs,
	// one of the demo's IDs.
	theirs.RegisterTTL(t, "web", "web-theirs", 9999, nil, nil)
	theirs.RegisterTTL(t, "api", "api-2", 9998, nil, nil)
	before := agentServiceIDs(t, client)

	// A demo that does not refuse runs until stopped: bound it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	refused := exec.CommandContext(ctx, demo, args...)
	refused.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	refused.Cancel = func() error { return syscall.Kill(-refused.Process.Pid, syscall.SIGKILL) }
	refused.WaitDelay = 5 * time.Second
	b, err := refused.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "already has services with the demo's IDs [api-2]; the demo does not take them over") {
		t.Fatalf("with api-2 taken: err %v, output:\n%s\nwant a refusal naming api-2", err, b)
	}
	if got := agentServiceIDs(t, client); !slices.Equal(got, before) {
		t.Fatalf("a refused demo changed the agent's services: %v, before %v", got, before)
	}
	if err := client.Agent().ServiceDeregister("api-2"); err != nil {
		t.Fatal(err)
	}

	run, out := startDemo(t, demo, args...)
	waitOutput(t, run.Process, out, "consul-xds-bridge is running", 60*time.Second)
	if !strings.Contains(out.String(), "using the Consul agent at http://"+theirs.HTTPAddr()) {
		t.Errorf("the demo did not say it uses the given agent:\n%s", out.String())
	}
	ids := agentServiceIDs(t, client)
	for _, id := range append(demoIDs(), "web-theirs") {
		if !slices.Contains(ids, id) {
			t.Errorf("%s is not registered on the given agent: %v", id, ids)
		}
	}

	// The admin token is in the file the demo names.
	m := regexp.MustCompile(`admin token:\s+in (\S+) \(`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("the demo did not say where the admin token is:\n%s", out.String())
	}
	tokenBytes, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatalf("the admin token file the demo names: %v", err)
	}
	token := strings.TrimSpace(string(tokenBytes))

	// The proxyless gRPC client is a connected, SYNCED proxy.
	eventually(t, 20*time.Second, "demo-grpc-client SYNCED on /v1/proxies", func() (bool, string) {
		var proxies []struct {
			NodeID string `json:"node_id"`
			Status string `json:"status"`
		}
		if err := adminJSON(admin, token, "/v1/proxies", &proxies); err != nil {
			return false, err.Error()
		}
		for _, p := range proxies {
			if p.NodeID == "demo-grpc-client" && p.Status == "SYNCED" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", proxies)
	})

	// curl web-1's /fail, then /recover, and watch its endpoint in EDS.
	bm := regexp.MustCompile(`(?m)^\s+web-1\s+(http://127\.0\.0\.1:(\d+))\s`).FindStringSubmatch(out.String())
	if bm == nil {
		t.Fatalf("the demo did not print web-1's address:\n%s", out.String())
	}
	backend, endpoint := bm[1], "127.0.0.1:"+bm[2]
	edsHealth := func(want string) func() (bool, string) {
		return func() (bool, string) {
			var cat struct {
				UsedBy map[string]struct {
					Endpoints map[string]map[string]struct {
						Health string `json:"health"`
					} `json:"endpoints"`
				} `json:"used_by"`
			}
			if err := adminJSON(admin, token, "/v1/catalog", &cat); err != nil {
				return false, err.Error()
			}
			got := cat.UsedBy["web"].Endpoints["web"][endpoint].Health
			return got == want, fmt.Sprintf("web's endpoint %s is %q", endpoint, got)
		}
	}
	curl := func(path string) {
		t.Helper()
		resp, err := http.Get(backend + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("curl %s%s: %s", backend, path, resp.Status)
		}
	}
	eventually(t, 15*time.Second, "web-1 HEALTHY at first", edsHealth("HEALTHY"))
	curl("/fail")
	eventually(t, 15*time.Second, "web-1 UNHEALTHY after /fail", edsHealth("UNHEALTHY"))
	curl("/recover")
	eventually(t, 15*time.Second, "web-1 HEALTHY after /recover", edsHealth("HEALTHY"))

	// Ctrl-C: exit 0, having deregistered its own services only.
	if err := syscall.Kill(run.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the demo stopped with %v:\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the demo did not stop on SIGINT:\n%s", out.String())
	}
	if got, want := agentServiceIDs(t, client), []string{"web-theirs"}; !slices.Equal(got, want) {
		t.Errorf("after the demo the agent has %v, want %v (theirs kept, the demo's gone)", got, want)
	}
}
