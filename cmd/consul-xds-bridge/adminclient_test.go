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

// TestStatusAndPlanWithAdminToken: with admin.token_file set and the admin
// listener on a Unix socket, status and plan work from the config alone,
// from -admin with $CONSUL_XDS_BRIDGE_ADMIN_TOKEN, and with
// -admin-token-file; a wrong or missing token fails with a hint.
func TestStatusAndPlanWithAdminToken(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, []string{"v1"}, nil)
	agent.RegisterTTL(t, "web", "web-2", 1002, []string{"v2"}, nil)
	dir := t.TempDir()
	token := filepath.Join(dir, "admin-token")
	wrong := filepath.Join(dir, "wrong-token")
	os.WriteFile(token, []byte("tok-"+t.Name()+"\n"), 0o600)
	os.WriteFile(wrong, []byte("not-it\n"), 0o600)
	sock := filepath.Join(dir, "admin.sock")
	file := filepath.Join(dir, "config.hcl")
	src := strings.Replace(planPolicy, "%CONSUL%", agent.HTTPAddr(), 1) +
		"admin {\n  listen     = \"unix://" + sock + "\"\n  token_file = \"" + token + "\"\n}\n"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runDaemon(t, file)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: d.XDSAddr().String(), NodeID: "edge-1", Cluster: "edge"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Wait(ctx, func(s adsclient.State) bool { return len(s.Endpoints("web")) == 2 }); err != nil {
		t.Fatal(err)
	}

	cmd := func(env string, args ...string) (int, string) {
		t.Helper()
		t.Setenv(adminTokenEnv, env)
		var out, errOut bytes.Buffer
		code := realMain(args, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	if code, out := cmd("", "status", "-config", file); code != 0 || !strings.Contains(out, "edge-1") {
		t.Errorf("status -config (token from admin.token_file, Unix socket): exit %d\n%s", code, out)
	}
	if code, out := cmd("tok-"+t.Name(), "status", "-admin", "unix://"+sock); code != 0 || !strings.Contains(out, "edge-1") {
		t.Errorf("status -admin with $%s: exit %d\n%s", adminTokenEnv, code, out)
	}
	if code, out := cmd("", "status", "-admin", "unix://"+sock, "-admin-token-file", token); code != 0 || !strings.Contains(out, "edge-1") {
		t.Errorf("status -admin-token-file: exit %d\n%s", code, out)
	}
	if code, out := cmd("", "status", "-admin", "unix://"+sock); code != 1 || !strings.Contains(out, "401") || !strings.Contains(out, adminTokenEnv) {
		t.Errorf("status without a token: exit %d, want 1 with a hint\n%s", code, out)
	}
	if code, out := cmd("", "status", "-config", file, "-admin-token-file", wrong); code != 1 || !strings.Contains(out, "refused") {
		t.Errorf("status with a wrong token: exit %d, want 1\n%s", code, out)
	}
	if code, out := cmd("", "plan", "-config", file); code != 0 || !strings.Contains(out, "No changes.") {
		t.Errorf("plan -config (token from admin.token_file): exit %d, want 0\n%s", code, out)
	}
	if code, out := cmd("", "plan", "-config", file, "-admin-token-file", wrong); code != 1 || !strings.Contains(out, "refused") {
		t.Errorf("plan with a wrong token: exit %d, want 1\n%s", code, out)
	}
}

// TestStatusAndPlanFindGeneratedToken: with no admin.token_file the
// bridge generates its token in consul.state_dir, and status and plan
// given the same -config find it there; with -admin alone (no config,
// no token) status fails with a hint naming the ways to give one.
func TestStatusAndPlanFindGeneratedToken(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, []string{"v1"}, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "config.hcl")
	sock := filepath.Join(dir, "admin.sock")
	src := strings.Replace(planPolicy, "address = \"%CONSUL%\"", "address = \""+agent.HTTPAddr()+"\"\n  state_dir = \""+dir+"\"", 1) +
		"admin {\n  listen = \"unix://" + sock + "\"\n}\n"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runDaemon(t, file)
	if want := filepath.Join(dir, "admin-token"); d.AdminTokenFile() != want {
		t.Fatalf("token file %q, want %q", d.AdminTokenFile(), want)
	}
	cmd := func(args ...string) (int, string) {
		t.Helper()
		t.Setenv(adminTokenEnv, "")
		t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no stray default token
		var out, errOut bytes.Buffer
		code := realMain(args, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	if code, out := cmd("status", "-config", file); code != 0 {
		t.Errorf("status -config with a generated token: exit %d\n%s", code, out)
	}
	if code, out := cmd("plan", "-config", file); code != 0 || !strings.Contains(out, "No changes.") {
		t.Errorf("plan -config with a generated token: exit %d\n%s", code, out)
	}
	if code, out := cmd("status", "-admin", "unix://"+sock); code != 1 || !strings.Contains(out, "401") || !strings.Contains(out, "-admin-token-file") {
		t.Errorf("status without any token: exit %d, want 1 with a hint\n%s", code, out)
	}
}
