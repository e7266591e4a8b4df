package bridge_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/browsertest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// corsPolicy turns CORS on for a route: per-route CORS in
// typed_per_filter_config, which Envoy 1.26 brought.
const corsPolicy = `
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "shop" {
      route {
        service = "web"
        cors {
          allow_origins = ["https://shop.example.com"]
          allow_methods = ["GET"]
        }
      }
    }
  }
}
`

// TestConsoleShowsOlderEnvoy: an Envoy 1.22 proxy has a line under its
// node id saying what it is served without, and its page lists it; a
// proxy without a version has no such line.
func TestConsoleShowsOlderEnvoy(t *testing.T) {
	ctx := browsertest.New(t)
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.hcl")
	tokenFile := filepath.Join(dir, "admin-token")
	writeFile(t, file, corsPolicy)
	writeFile(t, tokenFile, "console-s3cret\n")
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	h := startBridgeWith(t, agent, fwd, func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
		c.Settings.Admin.TokenFile = tokenFile
	})
	for id, version := range map[string]string{"old-envoy": "1.22.5", "any-envoy": ""} {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := adsclient.Dial(dctx, adsclient.Config{Addr: h.daemon.XDSAddr().String(), NodeID: id, Cluster: "edge", UserAgentVersion: version})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	base := "http://" + h.daemon.AdminAddr().String()
	const wait = 10 * time.Second
	run(t, ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#token"), "console-s3cret"), chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)))
	browsertest.WaitText(t, ctx, `tr.proxy[data-node="old-envoy"] .downgraded`, wait, func(s string) bool {
		return strings.Contains(s, "Envoy 1.22") && strings.Contains(s, "1 newer feature rewritten or left out")
	})
	browsertest.WaitText(t, ctx, `tr.proxy[data-node="any-envoy"] .proxy-status`, wait, is("SYNCED"))
	if evalBool(t, ctx, `document.querySelector('tr.proxy[data-node="any-envoy"] .downgraded') !== null`) {
		t.Error("a proxy without a version has a downgraded line")
	}
	goTo(t, ctx, "#/proxy/old-envoy")
	browsertest.WaitText(t, ctx, `ul.downgraded`, wait, func(s string) bool {
		return strings.Contains(s, "per-route CORS in typed_per_filter_config: served as the cors field")
	})
}
