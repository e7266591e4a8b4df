// Package browsertest runs a headless Chromium for tests that check what
// a real browser shows (the admin console), through chromedp.
//
// Like the Consul binary of the integration tests, a missing browser skips
// the test on a developer's machine and fails it under CI=true, so the
// browser tests can never turn into silent skips in CI
// (scripts/install-chromium.sh installs Debian's chromium for `make test`).
package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

const installHint = "run `make test` or `scripts/install-chromium.sh` (apt-get install chromium), or set CHROME_BIN"

// Binary returns the browser to run: $CHROME_BIN, else chromium,
// chromium-browser, google-chrome or headless-shell on $PATH.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CHROME_BIN"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("browsertest: CHROME_BIN=%q: %v", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("browsertest: no Chromium found; %s", installHint)
	}
	t.Skipf("browsertest: no Chromium found; %s", installHint)
	return ""
}

// New starts a headless browser with a laptop-sized window and returns a
// chromedp context for one tab; everything stops at the end of the test.
func New(t testing.TB) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Binary(t)),
		// CI runs as root, where Chromium's sandbox cannot start.
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 800),
		chromedp.Flag("hide-scrollbars", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	// The first Run starts the browser: fail here, not in the first step.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("browsertest: starting Chromium: %v", err)
	}
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return ctx
}

// Text returns the textContent of the first element matching the CSS
// selector, and whether there was one. It does not wait.
func Text(ctx context.Context, selector string) (string, bool, error) {
	type result struct {
		Found bool   `json:"found"`
		Text  string `json:"text"`
	}
	sel, _ := json.Marshal(selector)
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%s); return {found: !!e, text: e ? e.textContent : ""}; })()`, sel)
	res, err := chromedp.Run(ctx, chromedp.Evaluate[result](js))
	return res.Text, res.Found, err
}

// WaitText waits until the element matching selector exists and ok
// accepts its text, and returns the text; it fails the test after
// timeout with the last text seen.
func WaitText(t testing.TB, ctx context.Context, selector string, timeout time.Duration, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	var found bool
	for {
		text, f, err := Text(ctx, selector)
		if err != nil {
			t.Fatalf("browsertest: reading %s: %v", selector, err)
		}
		last, found = text, f
		if found && ok(text) {
			return text
		}
		if time.Now().After(deadline) {
			page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + " session storage keys: " + Object.keys(sessionStorage).join(",") + "\n" + document.body.innerText.slice(0, 2000)`))
			t.Fatalf("browsertest: %s after %s: found=%v text=%q; the page:\n%s", selector, timeout, found, last, page)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
