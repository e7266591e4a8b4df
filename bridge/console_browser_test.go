package bridge_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/browsertest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/routetest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

var screenshots = flag.Bool("screenshots", false, "write the console's screenshots into docs/ (docs/console.md embeds them)")

const consolePolicy = `
service "web" {
  subset "v2" {
    tags = ["v2"]
  }
}
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "shop" {
      route {
        match {
          path_prefix = "/api/"
        }
        service = "api"
      }
      route {
        match {
          path_prefix = "/v2/"
        }
        service = "web"
        subset  = "v2"
      }
      route {
        service = "web"
      }
    }
  }
}
`

// TestConsoleInBrowser loads every console page in headless Chromium
// against a bridge on real Consul with the admin token on, and checks
// what a person would see: the sign-in form, a NACKing proxy shown as
// NACKED with its error text, the config dump tree, a health flip
// appearing without a reload, a rejected reload's diagnostics at
// file:line:col, and a plan's per-group diff.
func TestConsoleInBrowser(t *testing.T) {
	ctx := browsertest.New(t)
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, []string{"v1"}, nil)
	agent.RegisterTTL(t, "web", "web-2", 1002, []string{"v2"}, nil)
	agent.RegisterTTL(t, "api", "api-1", 2001, nil, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.hcl")
	tokenFile := filepath.Join(dir, "admin-token")
	writeFile(t, file, consolePolicy)
	writeFile(t, tokenFile, "console-s3cret\n")
	fwd := consultest.NewForwarder(t, agent.HTTPAddr())
	h := startBridgeWith(t, agent, fwd, func(c *bridge.Config) {
		c.ConfigFiles = []string{file}
		c.Policy = loadPolicy(t, file)
		c.Settings.Admin.TokenFile = tokenFile
	})
	edge := dialAs(t, h, adsclient.SotW, "edge", nil)
	// dialPicky connects a proxy of group edge that NACKs the api cluster.
	dialPicky := func(node string) *adsclient.Client {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		picky, err := adsclient.Dial(dctx, adsclient.Config{
			Addr: h.daemon.XDSAddr().String(), NodeID: node, Cluster: "edge", UserAgent: "envoy/1.31.0",
			NACK: func(typeURL, _ string, res []*anypb.Any) error {
				for _, r := range res {
					var c clusterv3.Cluster
					if typeURL == adsclient.ClusterType && r.UnmarshalTo(&c) == nil && c.GetName() == "api" {
						return errors.New("cluster api: unsupported setting (console test)")
					}
				}
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = picky.Close() })
		return picky
	}
	dialPicky("picky-1")
	waitEndpoints(t, "web", join(ep(1001, "HEALTHY"), ep(1002, "HEALTHY")), edge)
	base := "http://" + h.daemon.AdminAddr().String()
	const wait = 10 * time.Second
	any := func(string) bool { return true }

	t.Run("sign in and proxies", func(t *testing.T) {
		run(t, ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
		// A wrong token is refused and the form stays.
		run(t, ctx, chromedp.SendKeys(chromedp.CSS("#token"), "wrong"), chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)))
		browsertest.WaitText(t, ctx, "#login .diag", wait, func(s string) bool { return strings.Contains(s, "refused") })
		run(t, ctx, chromedp.SetValue(chromedp.CSS("#token"), "console-s3cret"), chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)))
		browsertest.WaitText(t, ctx, `tr.proxy[data-node="picky-1"] .proxy-status`, wait, is("NACKED"))
		browsertest.WaitText(t, ctx, `tr.proxy[data-node="test-sotw-edge"] .proxy-status`, wait, is("SYNCED"))
		text := browsertest.WaitText(t, ctx, `tr.nack-row[data-node="picky-1"]`, wait, any)
		if !strings.Contains(text, "CDS NACKED version") || !strings.Contains(text, "unsupported setting (console test)") {
			t.Errorf("NACK row = %q, want the type, the rejected version and the proxy's text", text)
		}
		browsertest.WaitText(t, ctx, `[data-count="NACKED"] .n`, wait, is("1"))
		browsertest.WaitText(t, ctx, `[data-count="ALL"] .n`, wait, is("2"))
		shot(t, ctx, "console-proxies.png")
		// Searching by node id leaves the proxies whose id has it.
		run(t, ctx, chromedp.SendKeys(chromedp.CSS("#filter-node"), "picky"))
		browsertest.WaitText(t, ctx, "#proxies tbody", wait, func(s string) bool {
			return strings.Contains(s, "picky-1") && !strings.Contains(s, "test-sotw-edge")
		})
		evalBool(t, ctx, `((el) => { el.value = ""; el.dispatchEvent(new Event("input")); return true })(document.querySelector("#filter-node"))`)
		browsertest.WaitText(t, ctx, "#proxies tbody", wait, func(s string) bool { return strings.Contains(s, "test-sotw-edge") })
		// Filtering by status leaves only the NACKing proxy.
		run(t, ctx, chromedp.Click(chromedp.CSS(`[data-count="NACKED"]`)))
		browsertest.WaitText(t, ctx, "#proxies tbody", wait, func(s string) bool {
			return strings.Contains(s, "picky-1") && !strings.Contains(s, "test-sotw-edge")
		})
		run(t, ctx, chromedp.Click(chromedp.CSS(`[data-count="ALL"]`)))
		browsertest.WaitText(t, ctx, "#proxies tbody", wait, func(s string) bool { return strings.Contains(s, "test-sotw-edge") })
		// A phone-sized screen still shows node, group, status and types.
		run(t, ctx, chromedp.EmulateViewport(390, 800))
		shot(t, ctx, "console-proxies-phone.png")
		run(t, ctx, chromedp.EmulateViewport(1280, 800))
	})

	t.Run("one proxy", func(t *testing.T) {
		goTo(t, ctx, "#/proxy/test-sotw-edge")
		browsertest.WaitText(t, ctx, "#dump", wait, func(s string) bool { return strings.Contains(s, "clusters") })
		run(t, ctx, chromedp.Click(chromedp.CSS(`#dump details[data-path="/clusters"] > summary`)))
		browsertest.WaitText(t, ctx, `#dump details[data-path="/clusters"]`, wait, func(s string) bool {
			return strings.Contains(s, "{ web }") && strings.Contains(s, "{ api }")
		})
		// The tree stays open across the page's refreshes.
		time.Sleep(2500 * time.Millisecond)
		browsertest.WaitText(t, ctx, `#dump details[data-path="/clusters/0"] > summary`, time.Second, any)
		run(t, ctx, chromedp.Click(chromedp.CSS(`#dump details[data-path="/clusters/1"] > summary`)))
		browsertest.WaitText(t, ctx, `#dump details[data-path="/clusters/1"]`, wait, func(s string) bool { return strings.Contains(s, "connect_timeout") })
		evalBool(t, ctx, `(document.querySelector("#dump").previousElementSibling.scrollIntoView(), true)`)
		shot(t, ctx, "console-proxy.png")
		// The NACKing proxy's history has the push it rejected, with
		// the proxy's text.
		goTo(t, ctx, "#/proxy/picky-1")
		browsertest.WaitText(t, ctx, `#history tr[data-event="nack"]`, wait, func(s string) bool {
			return strings.Contains(s, "CDS") && strings.Contains(s, "unsupported setting (console test)")
		})
		browsertest.WaitText(t, ctx, `#history tr[data-event="push"]`, wait, any)
	})

	t.Run("catalog health flip without reload", func(t *testing.T) {
		goTo(t, ctx, "#/catalog")
		browsertest.WaitText(t, ctx, `li[data-instance="web-1"] .instance-status`, wait, is("passing"))
		browsertest.WaitText(t, ctx, `tr[data-service="web"] td.groups`, wait, func(s string) bool { return strings.Contains(s, "edge") })
		browsertest.WaitText(t, ctx, `li[data-instance="web-2"] .eds-status`, wait, is("HEALTHY"))
		evalBool(t, ctx, `window.__noReload = true`)
		agent.SetTTL(t, "service:web-1", "critical")
		browsertest.WaitText(t, ctx, `li[data-instance="web-1"] .instance-status`, wait, is("critical"))
		// What proxies are told, beside Consul's check.
		browsertest.WaitText(t, ctx, `li[data-instance="web-1"] .eds-status`, wait, is("UNHEALTHY"))
		if !evalBool(t, ctx, `window.__noReload === true`) {
			t.Fatal("the page reloaded to show the health change")
		}
		// web-2, the only v2 instance, fails: the subset a route sends
		// /v2/ to has no healthy endpoint, on the Catalog and on the page
		// of a proxy whose group routes there.
		agent.SetTTL(t, "service:web-2", "critical")
		browsertest.WaitText(t, ctx, `li[data-instance="web-2"] .eds-status`, wait, is("UNHEALTHY"))
		text := browsertest.WaitText(t, ctx, `tr[data-service="web"] [data-starved="web.v2"]`, wait, any)
		if !strings.Contains(text, "0 of 1") || !strings.Contains(text, "edge") {
			t.Errorf("starved subset flag = %q, want web.v2 with 0 of 1 healthy and the group edge", text)
		}
		goTo(t, ctx, "#/proxy/test-sotw-edge")
		browsertest.WaitText(t, ctx, `#starved [data-starved="web.v2"]`, wait, any)
		agent.SetTTL(t, "service:web-2", "passing")
		goTo(t, ctx, "#/catalog")
		browsertest.WaitText(t, ctx, `li[data-instance="web-2"] .eds-status`, wait, is("HEALTHY"))
		shot(t, ctx, "console-catalog.png")
	})

	t.Run("activity charts from live data", func(t *testing.T) {
		goTo(t, ctx, "#/activity")
		points := func(chart string) int {
			n, err := strconv.Atoi(waitEval(t, ctx, `document.querySelector("#chart-`+chart+`")?.dataset.points ?? ""`, wait, func(s string) bool { return s != "" }))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		latest := func(chart string, ok func(float64) bool) float64 {
			t.Helper()
			var v float64
			waitEval(t, ctx, `document.querySelector("#chart-`+chart+`")?.dataset.latest ?? ""`, wait, func(s string) bool {
				f, err := strconv.ParseFloat(s, 64)
				v = f
				return err == nil && ok(f)
			})
			return v
		}
		// Two proxies are connected; picky-1's NACK is counted.
		latest("proxies", func(v float64) bool { return v == 2 })
		nacks := waitEval(t, ctx, `document.querySelector("#chart-nacks")?.dataset.total ?? ""`, wait, func(s string) bool { return s != "" && s != "0" })
		browsertest.WaitText(t, ctx, "#chart-proxies svg", wait, any)
		c2p, fan := points("change-to-push"), points("fanout")
		if c2p == 0 {
			t.Error("no change → push point before the flip: the first build served the catalog")
		}
		// A health flip is one more build, pushed and fanned out: both
		// charts gain a point, without a reload.
		evalBool(t, ctx, `window.__noReload = true`)
		agent.SetTTL(t, "service:api-1", "critical")
		waitEval(t, ctx, `document.querySelector("#chart-change-to-push")?.dataset.points ?? ""`, wait, func(s string) bool { n, _ := strconv.Atoi(s); return n > c2p })
		waitEval(t, ctx, `document.querySelector("#chart-fanout")?.dataset.points ?? ""`, wait, func(s string) bool { n, _ := strconv.Atoi(s); return n > fan })
		browsertest.WaitText(t, ctx, "#builds tbody tr", wait, func(s string) bool { return strings.Contains(s, "EDS") })
		if v := latest("change-to-push", func(v float64) bool { return v > 0 }); v > 10000 {
			t.Errorf("latest change → push %v ms", v)
		}
		// A third proxy that NACKs too: the proxies chart reaches 3, the
		// NACK count grows and a bar is drawn for it.
		picky2 := dialPicky("picky-2")
		latest("proxies", func(v float64) bool { return v == 3 })
		waitEval(t, ctx, `document.querySelector("#chart-nacks")?.dataset.total ?? ""`, wait, func(s string) bool { a, _ := strconv.Atoi(s); b, _ := strconv.Atoi(nacks); return a > b })
		waitEval(t, ctx, `String(document.querySelectorAll("#chart-nacks rect.bar").length)`, wait, func(s string) bool { return s != "0" })
		shot(t, ctx, "console-activity.png")
		_ = picky2.Close()
		latest("proxies", func(v float64) bool { return v == 2 })
		agent.SetTTL(t, "service:api-1", "passing")
		if !evalBool(t, ctx, `window.__noReload === true`) {
			t.Fatal("the page reloaded to draw the charts")
		}
	})

	t.Run("reach of a group", func(t *testing.T) {
		// The group column links to the group's reach.
		goTo(t, ctx, "#/proxies")
		run(t, ctx, chromedp.Click(chromedp.CSS(`tr.proxy[data-node="test-sotw-edge"] a.group-link`)))
		browsertest.WaitText(t, ctx, `#reach [data-listener]`, wait, func(s string) bool { return strings.Contains(s, "8080") })
		// web-1 (v1) failed its check above; web-2 (v2) passes.
		v2 := browsertest.WaitText(t, ctx, `#reach .reach-route [data-cluster="web.v2"]`, wait, func(s string) bool { return strings.Contains(s, "healthy") })
		if !strings.Contains(v2, "service web") || !strings.Contains(v2, "1/1 healthy") {
			t.Errorf("reach of web.v2 = %q, want service web with 1/1 healthy", v2)
		}
		web := browsertest.WaitText(t, ctx, `#reach .reach-route [data-cluster="web"]`, wait, func(s string) bool { return strings.Contains(s, "healthy") })
		if !strings.Contains(web, "service web") || !strings.Contains(web, "1/2 healthy") {
			t.Errorf("reach of web = %q, want service web with 1/2 healthy", web)
		}
		routes := browsertest.WaitText(t, ctx, `#reach [data-vhost]`, wait, any)
		if !strings.Contains(routes, "prefix /v2/") || !strings.Contains(routes, "prefix /api/") || !strings.Contains(routes, "service api") {
			t.Errorf("reach routes = %q, want each route's match and its service", routes)
		}
		shot(t, ctx, "console-reach.png")
	})

	t.Run("policy rejected reload", func(t *testing.T) {
		goTo(t, ctx, "#/policy")
		browsertest.WaitText(t, ctx, "#sources", wait, func(s string) bool { return strings.Contains(s, file) })
		browsertest.WaitText(t, ctx, "#last-reload", wait, func(s string) bool { return strings.Contains(s, "accepted") })
		// A healthy bridge's page says nothing it has nothing to say about
		// (it used to print the text "nullnullnull").
		if page := browsertest.WaitText(t, ctx, "#view", wait, any); strings.Contains(page, "null") {
			t.Errorf("the Policy page shows %q", page)
		}
		writeFile(t, file, consolePolicy+"\nproxy \"edge\" {\n}\n")
		text := browsertest.WaitText(t, ctx, "#last-reload", wait, func(s string) bool { return strings.Contains(s, "rejected") })
		if !regexp.MustCompile(regexp.QuoteMeta(file) + `:\d+:\d+: `).MatchString(text) {
			t.Errorf("rejected reload = %q, want a diagnostic at file:line:col", text)
		}
		shot(t, ctx, "console-policy.png")
		writeFile(t, file, consolePolicy)
		browsertest.WaitText(t, ctx, "#last-reload", wait, func(s string) bool { return strings.Contains(s, "accepted") })
	})

	t.Run("try a request", func(t *testing.T) {
		goTo(t, ctx, "#/try")
		browsertest.WaitText(t, ctx, "#try-form", wait, any)
		run(t, ctx, chromedp.SetValue(chromedp.CSS("#try-cluster"), "edge"), chromedp.SetValue(chromedp.CSS("#try-path"), "/v2/cart"),
			chromedp.SetValue(chromedp.CSS("#try-host"), "shop.example.com"), chromedp.Click(chromedp.CSS("#try-run")))
		got := browsertest.WaitText(t, ctx, "#try-got", wait, any)
		// The same request as a route test, against the same policy.
		doc, diags := policy.Parse("try.hcl", []byte("route_test \"v2\" {\n  proxy = \"edge\"\n  request {\n    host = \"shop.example.com\"\n    path = \"/v2/cart\"\n  }\n  expect {\n    no_route = false\n  }\n}\n"))
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		tests, diags := routetest.Decode(doc)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		results, diags := routetest.Run(loadPolicy(t, file), nil, tests)
		if diags.HasErrors() || len(results) != 1 {
			t.Fatal(diags)
		}
		if got != results[0].Got || got != `cluster "web.v2"` {
			t.Errorf("Try a request says %q, the route test %q; want both cluster \"web.v2\"", got, results[0].Got)
		}
		if vh := browsertest.WaitText(t, ctx, "#try-vhost", wait, any); vh != results[0].VirtualHost {
			t.Errorf("virtual host %q, route test %q", vh, results[0].VirtualHost)
		}
		browsertest.WaitText(t, ctx, `.try-cluster[data-cluster="web.v2"]`, wait, func(s string) bool { return strings.Contains(s, "127.0.0.1:1002") })
	})

	t.Run("plan", func(t *testing.T) {
		goTo(t, ctx, "#/plan")
		browsertest.WaitText(t, ctx, "#plan-doc", wait, func(s string) bool { return strings.Contains(s, file) })
		planned := strings.Replace(consolePolicy, `path_prefix = "/api/"`, `path_prefix = "/v2/api/"`, 1)
		run(t, ctx, chromedp.SetValue(chromedp.CSS("#plan-text"), planned), chromedp.Click(chromedp.CSS("#plan-run")))
		text := browsertest.WaitText(t, ctx, `.plan-section[data-node-cluster="edge"]`, wait, any)
		if !strings.Contains(text, "~ route edge.http") || !strings.Contains(text, file+":") || !strings.Contains(text, `"/api/" → "/v2/api/"`) {
			t.Errorf("plan for edge = %q, want the changed route with where it is declared and the field that changed", text)
		}
		browsertest.WaitText(t, ctx, `.plan-section[data-node-cluster=""][data-proxyless="false"]`, wait, func(s string) bool { return strings.Contains(s, "No changes") })
		browsertest.WaitText(t, ctx, `.plan-section[data-node-cluster=""][data-proxyless="true"]`, wait, func(s string) bool { return strings.Contains(s, "proxyless gRPC clients") })
		if summary := browsertest.WaitText(t, ctx, "#plan-summary", wait, any); !strings.Contains(summary, "to change") || !strings.Contains(summary, "connected proxies") {
			t.Errorf("plan summary = %q, want the counts the plan command prints", summary)
		}
		shot(t, ctx, "console-plan.png")
		// An invalid document shows its diagnostics instead.
		run(t, ctx, chromedp.SetValue(chromedp.CSS("#plan-text"), `proxy "edge" {`), chromedp.Click(chromedp.CSS("#plan-run")))
		browsertest.WaitText(t, ctx, "#plan-diagnostics", wait, func(s string) bool {
			return regexp.MustCompile(regexp.QuoteMeta(file) + `:\d+:\d+: `).MatchString(s)
		})
	})

	t.Run("consul unreachable banner", func(t *testing.T) {
		goTo(t, ctx, "#/catalog")
		browsertest.WaitText(t, ctx, `li[data-instance="web-2"] .eds-status`, wait, any)
		if waitEval(t, ctx, `String(document.querySelector("#consul-banner").hidden)`, wait, any) != "true" {
			t.Fatal("the Consul banner shows while Consul answers")
		}
		fwd.Stop()
		text := browsertest.WaitText(t, ctx, "#consul-banner:not([hidden])", 20*time.Second, func(s string) bool { return strings.Contains(s, "unreachable") })
		if !strings.Contains(text, "Consul at "+fwd.Addr()+" is unreachable since ") {
			t.Errorf("banner = %q, want the address and since when", text)
		}
		// On every page.
		goTo(t, ctx, "#/policy")
		browsertest.WaitText(t, ctx, "#sources", wait, any)
		browsertest.WaitText(t, ctx, "#consul-banner:not([hidden])", wait, func(s string) bool { return strings.Contains(s, fwd.Addr()) })
		shot(t, ctx, "console-consul-down.png")
		fwd.Start()
		browsertest.WaitText(t, ctx, "#consul-banner[hidden]", 20*time.Second, any)
	})
}

// waitEval polls a JavaScript expression (a string) until ok accepts it.
func waitEval(t *testing.T, ctx context.Context, js string, timeout time.Duration, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatal(err)
		}
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %q after %s", js, v, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func is(want string) func(string) bool {
	return func(s string) bool { return strings.TrimSpace(s) == want }
}

func run(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// goTo follows an in-page link, as a click on the navigation does; a
// fresh navigation would start a new session, without the token.
func goTo(t *testing.T, ctx context.Context, fragment string) {
	t.Helper()
	evalBool(t, ctx, "(location.hash = "+strconv.Quote(fragment)+") !== ''")
}

func evalBool(t *testing.T, ctx context.Context, js string) bool {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// shot captures the viewport; with -screenshots it lands in docs/.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if *screenshots {
		dir = filepath.Join("..", "docs")
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
