package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestPlanRefusesWhatTheReloadRefuses: a policy the running bridge's
// reload would reject (a header value Envoy refuses: the group cannot be
// translated) is refused by plan with exit 1 and the reason, as by
// /v1/plan (422) and validate; plan used to print it as a diff with exit
// 2 ("- listener edge.http"), while the bridge, given the file, kept
// serving the running world.
func TestPlanRefusesWhatTheReloadRefuses(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, []string{"v1"}, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "config.hcl")
	src := strings.Replace(planPolicy, "%CONSUL%", agent.HTTPAddr(), 1)
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	admin := runBridge(t, file)
	bad := strings.Replace(src, `      route {
        service = "web"
      }`, `      route {
        service = "web"
        request_headers {
          set = { "x-a" = "a\nb" }
        }
      }`, 1)
	badFile := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(badFile, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := realMain([]string{"plan", "-config", badFile, "-admin", admin}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "would refuse this policy on reload") || strings.Contains(out.String(), "- listener") {
		t.Fatalf("plan of a policy the reload refuses: exit %d, want 1 saying so\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
}

// TestPlanNamesOlderEnvoys: plan shows what the newest Envoy is served; a
// connected proxy on an older Envoy gets a rewritten copy (without what
// its Envoy lacks), so plan says which proxies those are.
func TestPlanNamesOlderEnvoys(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	file := filepath.Join(t.TempDir(), "config.hcl")
	if err := os.WriteFile(file, []byte(strings.Replace(planPolicy, "%CONSUL%", agent.HTTPAddr(), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runDaemon(t, file)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: d.XDSAddr().String(), NodeID: "old-edge", Cluster: "edge", Mode: adsclient.Delta, UserAgentVersion: "1.22.11"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Wait(ctx, func(s adsclient.State) bool { return len(s.ListenerNames()) == 1 }); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := realMain([]string{"plan", "-config", file, "-admin", d.AdminAddr().String()}, &out, &errOut); code != 0 {
		t.Fatalf("plan: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), `Note: proxies with node.cluster "edge"`) || !strings.Contains(out.String(), "Envoy 1.22 (1 connected): the plan shows what the newest Envoy gets") {
		t.Errorf("plan does not name the older Envoy:\n%s", out.String())
	}
}
