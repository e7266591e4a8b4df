package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
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
