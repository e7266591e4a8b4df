package bridge_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestBrokenKVDocumentAtStart: a bridge that starts while a KV policy
// document is broken has no last good policy. Without a state file it
// stays unready, naming the key and the problem, and answers no proxy (a
// policy without the document would give its group nothing). With the
// state file an earlier bridge wrote, it serves that document's last
// accepted version and reports the broken one.
func TestBrokenKVDocumentAtStart(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "api", "api-1", 2001, []string{"v1"}, nil)
	agent.RegisterTTL(t, "api", "api-2", 2002, []string{"v2"}, nil)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	// The edge group comes from a file; the sidecars' from KV.
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte(filePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	const prefix = "xds-bridge/policy/"
	put := func(key, val string) {
		t.Helper()
		if _, err := agent.Client().KV().Put(&api.KVPair{Key: prefix + key, Value: []byte(val)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	stateDir := t.TempDir()
	start := func(state string) *harness {
		return startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
			c.ConfigFiles = []string{file}
			c.Policy = loadPolicy(t, file)
			c.Settings.Consul.KVPrefix = prefix
			c.Settings.Consul.StateDir = state
		})
	}
	sidecarListener := func(c *adsclient.Client) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if _, err := c.Wait(ctx, func(s adsclient.State) bool {
			return slices.Equal(s.ListenerNames(), []string{"sidecar-*.outbound"}) && s.RouteConfig("sidecar-*.outbound") != nil
		}); err != nil {
			t.Fatalf("sidecar listener from KV: %v", err)
		}
	}

	// A first bridge accepts the document and keeps it in its state file.
	put("sidecars.hcl", kvPolicy("/"))
	first := start(stateDir)
	sidecarListener(dialAs(t, first, adsclient.Delta, "sidecar-web-1", nil))
	state, err := os.ReadFile(filepath.Join(stateDir, "kv-policy.json"))
	if err != nil || !strings.Contains(string(state), prefix+"sidecars.hcl") {
		t.Fatalf("state file = %q, %v; want the accepted document", state, err)
	}

	// The document breaks while that bridge runs: it keeps its last good
	// policy, as before.
	put("sidecars.hcl", `proxy "sidecar-*" { listener "outbound" { port = "not a number" } }`)
	deadline := time.Now().Add(10 * time.Second)
	for policyStatus(t, first).LastError == nil {
		if time.Now().After(deadline) {
			t.Fatal("the running bridge did not report the broken document")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A bridge started now without the state file answers nobody, not
	// even with the file's policy (the sidecars would get no listeners).
	bare := start("")
	readyz := "http://" + bare.daemon.AdminAddr().String() + "/readyz"
	deadline = time.Now().Add(10 * time.Second)
	for {
		code, body := get(t, readyz)
		if code == http.StatusServiceUnavailable && strings.Contains(body, prefix+"sidecars.hcl:1:") && strings.Contains(body, "rejected at start") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %s, want 503 naming the broken key and position", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	orphan := dialAs(t, bare, adsclient.Delta, "sidecar-web-1", nil)
	time.Sleep(time.Second)
	if n := len(orphan.Responses()); n != 0 {
		t.Fatalf("a bridge without a valid policy answered a proxy %d times; want none (the proxy keeps what it had)", n)
	}

	// One started with the state file serves the last accepted version.
	restored := start(stateDir)
	sidecarListener(dialAs(t, restored, adsclient.Delta, "sidecar-web-1", nil))
	st := policyStatus(t, restored)
	if st.LastError == nil || !strings.Contains(strings.Join(st.LastError.Diagnostics, "\n"), prefix+"sidecars.hcl:1:") {
		t.Errorf("last error = %+v, want the broken document reported", st.LastError)
	}
	if !strings.Contains(strings.Join(st.PolicyWarnings, "\n"), "last accepted versions of "+prefix+"sidecars.hcl") {
		t.Errorf("policy warnings %q do not say the state file's version is served", st.PolicyWarnings)
	}
	// Ready turns on right after the first snapshot is set, which a
	// client may already have read: wait for it (CI once read 503 here).
	readyz = "http://" + restored.daemon.AdminAddr().String() + "/readyz"
	for deadline = time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, body := get(t, readyz)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %s with the last accepted version served, want 200", code, body)
		}
	}
}
