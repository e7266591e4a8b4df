package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestPlanRefusesWhatTheReloadRefuses: a policy the running bridge's
// reload would reject (a header value Envoy refuses: the group cannot be
// translated) is refused by plan with exit 1 and the reason, as by
// /v1/plan (422) and validate; plan used to print it as a diff with exit
// 2 ("- listener edge.http"), while the bridge, given the file, kept
// serving the running world.
func TestPlanRefusesWhatTheReloadRefuses(t *testing.T) {
	_, dir, file, src := planFixture(t)
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
	_, _, file, _ := planFixture(t)
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

// TestPlanSaysWhenSettingsWaitForARestart: the bridge runs with the
// daemon settings it started with (a reload only logs that they
// changed); plan computes with its files' settings, so when they differ
// it says its diff is what a restart would serve, naming the settings.
func TestPlanSaysWhenSettingsWaitForARestart(t *testing.T) {
	_, dir, file, src := planFixture(t)
	admin := runBridge(t, file)
	var out, errOut bytes.Buffer
	if code := realMain([]string{"plan", "-config", file, "-admin", admin}, &out, &errOut); code != 0 || strings.Contains(errOut.String(), "other daemon settings") {
		t.Fatalf("plan of the running files: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	edited := filepath.Join(dir, "edited.hcl")
	if err := os.WriteFile(edited, []byte(strings.Replace(src, "consul {\n", "consul {\n  config_entries = true\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	realMain([]string{"plan", "-config", edited, "-admin", admin}, &out, &errOut)
	if !strings.Contains(errOut.String(), "other daemon settings than these files give (consul.ConfigEntries)") || !strings.Contains(errOut.String(), "only after a restart") {
		t.Errorf("plan with config_entries turned on:\n%s%s", out.String(), errOut.String())
	}
}
