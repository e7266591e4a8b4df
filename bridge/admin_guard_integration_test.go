package bridge_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
)

// adminCall sends one admin request as a browser or a script would:
// host overrides the Host header, token "" sends none, header adds
// headers.
type adminCall struct {
	method, url, host, token, body string
	header                         map[string]string
}

func (c adminCall) do(t *testing.T) (int, string) {
	t.Helper()
	req, err := http.NewRequest(c.method, c.url, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.host != "" {
		req.Host = c.host
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func planJSON(name, doc string) string {
	b, _ := json.Marshal(map[string]string{"name": name, "document": doc})
	return string(b)
}

// TestAdminToken: with admin.token_file set, everything but the probes,
// /metrics and the console's files needs the bearer token.
func TestAdminToken(t *testing.T) {
	agent := consultest.Start(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.Settings.Admin.TokenFile = tokenFile
	})
	base := "http://" + h.daemon.AdminAddr().String()
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _ := (adminCall{method: "GET", url: base + path}).do(t); code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Errorf("%s without token = %d, want it open", path, code)
		}
	}
	if code, _ := (adminCall{method: "GET", url: base + "/v1/policy", token: "s3cret-admin"}).do(t); code != http.StatusOK {
		t.Fatalf("/v1/policy with token = %d", code)
	}
	// The console's history and Consul state: GET with the token alone.
	for _, path := range []string{"/v1/history", "/v1/consul"} {
		if code, body := (adminCall{method: "GET", url: base + path, token: "s3cret-admin"}).do(t); code != http.StatusOK || !strings.Contains(body, "{") {
			t.Errorf("%s with token = %d %s", path, code, body)
		}
	}
	// The console's files hold no data and load without the token (the
	// page asks for it); every endpoint it calls needs it.
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/insight.js", "/ui/style.css"} {
		if code, body := (adminCall{method: "GET", url: base + path}).do(t); code != http.StatusOK || len(body) < 100 {
			t.Errorf("%s without token = %d (%d bytes), want the console's file", path, code, len(body))
		}
	}
	for _, path := range []string{"/v1/policy", "/v1/proxies", "/v1/proxies/history?node=x", "/v1/catalog", "/v1/config_dump?cluster=x", "/v1/history", "/v1/consul", "/v1/try?cluster=x&path=/", "/debug/pprof/"} {
		for _, tok := range []string{"", "wrong"} {
			if code, _ := (adminCall{method: "GET", url: base + path, token: tok}).do(t); code != http.StatusUnauthorized {
				t.Errorf("%s with token %q = %d, want 401", path, tok, code)
			}
		}
	}
	post := adminCall{method: "POST", url: base + "/v1/plan", body: planJSON("x.hcl", `proxy "x" {}`), header: map[string]string{"Content-Type": "application/json"}}
	if code, _ := post.do(t); code != http.StatusUnauthorized {
		t.Errorf("POST /v1/plan without token = %d, want 401", code)
	}
	post.token = "s3cret-admin"
	waitReady(t, h.daemon)
	if code, body := post.do(t); code != http.StatusOK && code != http.StatusUnprocessableEntity {
		t.Errorf("POST /v1/plan (JSON, token) = %d, want 200: %s", code, body)
	}
}

// TestAdminTokenGeneratedAtFirstStart: with no admin.token_file the
// bridge creates a token in its state directory (owner-only), logs the
// file's path but never the token, keeps it across restarts, and needs
// it on /v1.
func TestAdminTokenGeneratedAtFirstStart(t *testing.T) {
	agent := consultest.Start(t)
	state := t.TempDir()
	logs := &syncbuffer.Buffer{}
	start := func() *harness {
		return startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
			c.Settings.Admin.TokenFile = ""
			c.Settings.Consul.StateDir = state
			c.Logger = zerolog.New(logs)
		})
	}
	h := start()
	path := filepath.Join(state, "admin-token")
	if got := h.daemon.AdminTokenFile(); got != path {
		t.Fatalf("AdminTokenFile = %q, want %q", got, path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("generated token file mode %04o, want 0600", fi.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	token := strings.TrimSpace(string(b))
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(token) {
		t.Fatalf("generated token %d chars, want 64 hex digits", len(token))
	}
	base := "http://" + h.daemon.AdminAddr().String()
	if code, _ := (adminCall{method: "GET", url: base + "/v1/catalog"}).do(t); code != http.StatusUnauthorized {
		t.Errorf("/v1/catalog without token = %d, want 401 by default", code)
	}
	if code, _ := (adminCall{method: "GET", url: base + "/v1/policy", token: token}).do(t); code != http.StatusOK {
		t.Errorf("/v1/policy with the generated token = %d", code)
	}
	h2 := start() // a second bridge on the same state directory: same token
	if b2, _ := os.ReadFile(h2.daemon.AdminTokenFile()); strings.TrimSpace(string(b2)) != token {
		t.Error("a restart on the same state directory made a new token")
	}
	out := logs.String()
	if strings.Contains(out, token) {
		t.Error("the logs contain the admin token")
	}
	if !strings.Contains(out, path) {
		t.Errorf("the logs do not name the token file %s", path)
	}
}

// TestAdminRefusesForeignHostAndCrossSite: a page that rebinds its DNS
// name to the bridge sends its own Host and is refused before anything
// else; a cross-site text/plain or form POST, or JSON from another
// Origin, is refused even with the token's help.
func TestAdminRefusesForeignHostAndCrossSite(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	h := startBridge(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()))
	c := dial(t, h, 0, nil)
	waitEndpoints(t, "web", ep(1001, "HEALTHY"), c)
	addr := h.daemon.AdminAddr().String()
	base := "http://" + addr
	tok, _ := adminTokens.Load(addr)
	token := tok.(string)
	_, port, _ := strings.Cut(addr, ":")

	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.2.nip.io:" + port, "localhost.evil.example:" + port} {
		for _, path := range []string{"/v1/config_dump?cluster=anything", "/v1/catalog", "/metrics", "/ui/"} {
			if code, _ := (adminCall{method: "GET", url: base + path, host: host, token: token}).do(t); code != http.StatusMisdirectedRequest {
				t.Errorf("GET %s with Host %q = %d, want 421", path, host, code)
			}
		}
	}
	for _, host := range []string{addr, "localhost:" + port, "[::1]:" + port} {
		if code, _ := (adminCall{method: "GET", url: base + "/v1/catalog", host: host, token: token}).do(t); code != http.StatusOK {
			t.Errorf("GET /v1/catalog with Host %q = %d, want 200", host, code)
		}
	}

	doc := "export_all_services = true\n"
	crossSite := map[string]adminCall{
		"text/plain fetch":                {body: doc, header: map[string]string{"Content-Type": "text/plain;charset=UTF-8", "Origin": "http://evil.example"}},
		"text/plain, no Origin":           {body: doc, header: map[string]string{"Content-Type": "text/plain"}},
		"form":                            {body: "a=" + doc, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "null"}},
		"JSON from another Origin":        {body: planJSON("x.hcl", doc), header: map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}},
		"JSON, Sec-Fetch-Site cross-site": {body: planJSON("x.hcl", doc), header: map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}},
	}
	for name, call := range crossSite {
		for _, withToken := range []bool{false, true} {
			call.method, call.url = "POST", base+"/v1/plan"
			if withToken {
				call.token = token
			}
			if code, body := call.do(t); code != http.StatusForbidden {
				t.Errorf("%s (token %v) = %d, want 403: %s", name, withToken, code, body)
			}
		}
	}
	same := adminCall{method: "POST", url: base + "/v1/plan", token: token, body: planJSON("x.hcl", doc),
		header: map[string]string{"Content-Type": "application/json", "Origin": base, "Sec-Fetch-Site": "same-origin"}}
	if code, body := same.do(t); code != http.StatusOK {
		t.Errorf("same-origin JSON plan = %d, want 200: %s", code, body)
	}
}

func waitReady(t *testing.T, d *bridge.Daemon) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !d.Ready(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("bridge not ready within 15s")
		}
	}
}
