package bridge_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// TestAdminPprofOffByDefault: with admin.pprof unset, even a caller
// holding the admin token gets 404 on every /debug/pprof/ path (profiles
// reveal internals and cost CPU); the same token is accepted elsewhere,
// so the 404 is not an authentication refusal.
func TestAdminPprofOffByDefault(t *testing.T) {
	agent := consultest.Start(t)
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		if c.Settings.Admin.Pprof || c.Settings.Admin.TokenFile == "" {
			t.Fatal("harness: want pprof unset and an admin token")
		}
	})
	base := "http://" + h.daemon.AdminAddr().String()
	get := func(path string) int {
		t.Helper()
		resp, err := adminGet(base + path) // sends the admin token
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if code := get("/v1/policy"); code != http.StatusOK {
		t.Fatalf("/v1/policy with the token = %d, want 200", code)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/symbol", "/debug/pprof/goroutine?debug=1", "/debug/pprof/heap"} {
		if code := get(path); code != http.StatusNotFound {
			t.Errorf("%s with the token and pprof unset = %d, want 404", path, code)
		}
	}
}

// TestAdminSocketDefaultMode: an admin listener on a Unix socket with no
// mode configured is created 0660 (owner and group only), never open to
// every local user; it serves the admin API.
func TestAdminSocketDefaultMode(t *testing.T) {
	agent := consultest.Start(t)
	sock := filepath.Join(t.TempDir(), "admin.sock")
	startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.Settings.Admin.Listen = "unix://" + sock
	})
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("%s is %v, not a socket", sock, fi.Mode())
	}
	if fi.Mode().Perm() != 0o660 {
		t.Errorf("admin socket mode %04o, want 0660", fi.Mode().Perm())
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	resp, err := hc.Get("http://admin/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz over the admin socket = %d, want 200", resp.StatusCode)
	}
}
