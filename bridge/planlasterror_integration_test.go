package bridge_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// TestPlanSaysTheLastReloadWasRejected: while a broken KV document keeps
// every reload rejected, /v1/plan of a file edit is computed against the
// last accepted documents, which is not what saving the file gives (it is
// rejected with the KV document): the plan says so first, naming the
// rejection.
func TestPlanSaysTheLastReloadWasRejected(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	file := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte("export_all_services = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
		c.Settings.Consul.KVPrefix = "xds/"
	})
	for deadline := time.Now().Add(15 * time.Second); !h.daemon.Ready(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("never ready")
		}
	}
	if _, err := agent.Client().KV().Put(&api.KVPair{Key: "xds/broken.hcl", Value: []byte("service \"web\" {\n  connect_timeout = \n}\n")}, nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); h.daemon.Policy().LastError == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the broken KV document was never rejected")
		}
	}
	token, err := os.ReadFile(h.daemon.AdminTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	call := adminCall{method: "POST", url: "http://" + h.daemon.AdminAddr().String() + "/v1/plan", token: strings.TrimSpace(string(token)),
		body: planJSON(file, "export_all_services = true\nservice \"web\" {\n  connect_timeout = \"3s\"\n}\n"), header: map[string]string{"Content-Type": "application/json"}}
	code, body := call.do(t)
	var res struct {
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil || code != 200 {
		t.Fatalf("/v1/plan %d %s (%v)", code, body, err)
	}
	if len(res.Warnings) == 0 || !strings.Contains(res.Warnings[0], "last reload") || !strings.Contains(res.Warnings[0], "broken.hcl") {
		t.Errorf("/v1/plan with a rejected KV document: warnings %q, want the rejection named first", res.Warnings)
	}
}
