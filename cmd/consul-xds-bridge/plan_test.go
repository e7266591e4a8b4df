package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

const planPolicy = `
consul {
  address = "%CONSUL%"
}

service "web" {
  subset "v2" {
    tags = ["v2"]
  }
}

proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        service = "web"
      }
    }
  }
}
`

// planFixture starts Consul with web-1 (tag v1) and writes planPolicy
// against it to dir/config.hcl.
func planFixture(t *testing.T) (agent *consultest.Agent, dir, file, src string) {
	t.Helper()
	agent = consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, []string{"v1"}, nil)
	dir = t.TempDir()
	file = filepath.Join(dir, "config.hcl")
	src = strings.Replace(planPolicy, "%CONSUL%", agent.HTTPAddr(), 1)
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return agent, dir, file, src
}

// TestPlanAgainstRunningBridge: plan reports no changes for the policy the
// bridge runs, and names the changed route and the new listener of an
// edited one, with exit codes 0 and 2.
func TestPlanAgainstRunningBridge(t *testing.T) {
	agent, dir, file, src := planFixture(t)
	agent.RegisterTTL(t, "web", "web-2", 1002, []string{"v2"}, nil)
	admin := runBridge(t, file)

	var out, errOut bytes.Buffer
	if code := realMain([]string{"plan", "-config", file, "-admin", admin}, &out, &errOut); code != 0 {
		t.Fatalf("plan of the running policy: exit %d, want 0\n%s%s", code, out.String(), errOut.String())
	}
	if strings.Count(out.String(), "No changes.") != 3 { // no group, proxyless, edge
		t.Fatalf("plan output:\n%s", out.String())
	}

	edited := strings.Replace(src, `      route {
        service = "web"
      }`, `      route {
        match {
          path_prefix = "/v2/"
        }
        service = "web"
        subset  = "v2"
      }
      route {
        service = "web"
      }`, 1)
	edited = strings.Replace(edited, `proxy "edge" {`, `proxy "edge" {
  listener "admin" {
    port = 9000
    virtual_host "admin" {
      route {
        direct_response {
          status = 403
        }
      }
    }
  }`, 1)
	editedFile := filepath.Join(dir, "edited.hcl")
	if err := os.WriteFile(editedFile, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	if code := realMain([]string{"plan", "-config", editedFile, "-admin", admin}, &out, &errOut); code != 2 {
		t.Fatalf("plan of an edited policy: exit %d, want 2\n%s%s", code, out.String(), errOut.String())
	}
	// edge reaches the new subset's cluster: it is edge's change too, the
	// same with or without -cluster; the changed route shows its fields.
	for _, want := range []string{"+ listener  edge.admin", "+ route     edge.admin", "~ route     edge.http", "+ cluster   web.v2",
		`~ virtual_hosts[0].routes[0].match.prefix: "/" → "/v2/"`, `~ virtual_hosts[0].routes[0].route.cluster: "web" → "web.v2"`,
		"4 to add, 1 to change, 0 to remove."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPlanReadsKV: plan merges the running bridge's KV policy documents
// as the bridge does (so an unchanged world plans no changes, though a
// group and its routes live only in KV), and -kv-key plans a new version
// of one key.
func TestPlanReadsKV(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, []string{"v1"}, nil)
	agent.RegisterTTL(t, "api", "api-1", 2001, nil, nil)
	const key = "xds-bridge/policy/sidecars.hcl"
	kvDoc := func(prefix string) string {
		return "proxy \"sidecar-*\" {\n  listener \"outbound\" {\n    port = 9001\n    virtual_host \"api\" {\n      route {\n        match {\n          path_prefix = \"" + prefix + "\"\n        }\n        service = \"api\"\n      }\n    }\n  }\n}\n"
	}
	if _, err := agent.Client().KV().Put(&api.KVPair{Key: key, Value: []byte(kvDoc("/"))}, nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "config.hcl")
	src := strings.Replace(planPolicy, "%CONSUL%", agent.HTTPAddr(), 1)
	src = strings.Replace(src, "consul {", "consul {\n  kv_prefix = \"xds-bridge/policy/\"", 1)
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	admin := runBridge(t, file)

	var out, errOut bytes.Buffer
	if code := realMain([]string{"plan", "-config", file, "-admin", admin}, &out, &errOut); code != 0 {
		t.Fatalf("plan of the running policy (files + KV): exit %d, want 0\n%s%s", code, out.String(), errOut.String())
	}
	if strings.Count(out.String(), "No changes.") != 4 || !strings.Contains(out.String(), `node.cluster "sidecar-*"`) {
		t.Fatalf("plan output should show no changes for no group, proxyless, edge and the KV group sidecar-*:\n%s", out.String())
	}

	next := filepath.Join(dir, "next.hcl")
	if err := os.WriteFile(next, []byte(kvDoc("/v2/")), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	if code := realMain([]string{"plan", "-config", file, "-admin", admin, "-kv-key", key, next}, &out, &errOut); code != 2 {
		t.Fatalf("plan -kv-key of a changed document: exit %d, want 2\n%s%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "~ route     sidecar-*.outbound") || !strings.Contains(out.String(), "0 to add, 1 to change, 0 to remove.") {
		t.Errorf("plan -kv-key output lacks the changed route:\n%s", out.String())
	}

	broken := filepath.Join(dir, "broken.hcl")
	if err := os.WriteFile(broken, []byte(`proxy "sidecar-*" { listener "outbound" { port = "x" } }`), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	if code := realMain([]string{"plan", "-config", file, "-admin", admin, "-kv-key", key, broken}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), key+":1:") {
		t.Errorf("plan -kv-key of a broken document: exit %d, stderr %q; want 1 with the key's position", code, errOut.String())
	}
}

// runBridge runs a bridge on the config file until the test ends and
// returns its admin address once it is ready.
func runBridge(t *testing.T, file string) string {
	t.Helper()
	return runDaemon(t, file).AdminAddr().String()
}

// runDaemon runs a bridge on file's config, on random loopback ports
// (the admin listener stays on its Unix socket if it names one).
func runDaemon(t *testing.T, file string) *bridge.Daemon {
	t.Helper()
	cfg, _, diags := policy.LoadFiles(file)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	cfg.Settings.XDS.Listen = "127.0.0.1:0"
	if !strings.HasPrefix(cfg.Settings.Admin.Listen, "unix://") {
		cfg.Settings.Admin.Listen = "127.0.0.1:0"
	}
	d := bridge.New(bridge.Config{ConfigFiles: []string{file}, Settings: cfg.Settings, Policy: cfg.Policy, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-d.Started()
	for deadline := time.Now().Add(15 * time.Second); !d.Ready(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("bridge not ready")
		}
	}
	return d
}
