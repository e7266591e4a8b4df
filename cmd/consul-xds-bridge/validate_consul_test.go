package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// TestValidateAgainstLiveConsul: `validate -consul ADDR` reads the live
// catalog, so `route { service = "wbe" }` beside a registered web warns
// with "did you mean" (it used to pass silently, then 503 in production),
// and -strict fails on it.
func TestValidateAgainstLiveConsul(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	agent.SetTTL(t, "service:web-1", "passing")
	pol := writeTemp(t, "p.hcl", "proxy \"edge\" {\n  listener \"http\" {\n    port = 8080\n    virtual_host \"all\" {\n      route {\n        service = \"wbe\"\n      }\n    }\n  }\n}\n")
	var out, errOut bytes.Buffer
	if code := realMain([]string{"validate", pol, "-consul", agent.HTTPAddr()}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), `did you mean "web"?`) {
		t.Errorf("validate -consul: exit %d, stderr %q; want 0 with a warning suggesting web", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := realMain([]string{"validate", "-strict", "-consul", agent.HTTPAddr(), pol}, &out, &errOut); code != 1 {
		t.Errorf("validate -strict -consul: exit %d, want 1\n%s", code, errOut.String())
	}
}
