package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// TestPlanSeesConfigEntries: with consul.config_entries the running
// bridge merges Consul's config entries into its policy, and so must
// plan. A service-resolver's connect timeout is in the served web
// cluster: the running policy plans no changes (it planned "~ cluster
// web" before, the entry's timeout counted as a change). A file that also
// defines service "web", which the daemon refuses (a service an entry and
// a file both define), is an error naming the entry, not a plan.
func TestPlanSeesConfigEntries(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, []string{"v1"}, nil)
	if _, _, err := agent.Client().ConfigEntries().Set(&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "web", ConnectTimeout: 7 * time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	const src = `
consul {
  address        = "%CONSUL%"
  config_entries = true
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
	dir := t.TempDir()
	file := filepath.Join(dir, "config.hcl")
	running := strings.Replace(src, "%CONSUL%", agent.HTTPAddr(), 1)
	if err := os.WriteFile(file, []byte(running), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runDaemon(t, file)
	admin := d.AdminAddr().String()

	var out, errOut bytes.Buffer
	if code := realMain([]string{"plan", "-config", file, "-admin", admin}, &out, &errOut); code != 0 {
		t.Fatalf("plan of the running policy with config entries: exit %d, want 0\n%s%s", code, out.String(), errOut.String())
	}

	clash := filepath.Join(dir, "clash.hcl")
	if err := os.WriteFile(clash, []byte(running+"\nservice \"web\" {\n  connect_timeout = \"2s\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	code := realMain([]string{"plan", "-config", clash, "-admin", admin}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "service-resolver/web") {
		t.Fatalf("plan of a file that defines the entry's service: exit %d, stderr:\n%s\nwant 1 naming the entry service-resolver/web (the daemon refuses this policy)", code, errOut.String())
	}
}

// TestPlanUsageErrorsAreErrors: plan's exit code 2 means "changes", so a
// CI gate on it must not read a mistyped flag or a missing -config as a
// change: each exits 1 (and -h 0).
func TestPlanUsageErrorsAreErrors(t *testing.T) {
	for _, args := range [][]string{
		{"plan", "-confg", "x.hcl"},
		{"plan"},
		{"plan", "-config", "x.hcl", "-kv-key", "k"},
		{"plan", "-config", "x.hcl", "a.hcl", "b.hcl"},
	} {
		var out, errOut bytes.Buffer
		if code := realMain(args, &out, &errOut); code != 1 {
			t.Errorf("%q: exit %d, want 1\n%s", args, code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := realMain([]string{"plan", "-h"}, &out, &errOut); code != 0 {
		t.Errorf("plan -h: exit %d, want 0", code)
	}
}

// TestPlanKVKeyFileIsBounded: -kv-key's FILE is read as the bridge bounds
// a KV document: a FIFO is refused at once instead of hanging plan, and
// a file over the limit is refused naming it, before either is read.
func TestPlanKVKeyFileIsBounded(t *testing.T) {
	agent := consultest.Start(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "config.hcl")
	src := strings.Replace(planPolicy, "%CONSUL%", agent.HTTPAddr(), 1)
	src = strings.Replace(src, "consul {", "consul {\n  kv_prefix = \"xds-bridge/policy/\"", 1)
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.hcl")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.hcl")
	if err := os.WriteFile(big, bytes.Repeat([]byte("# x\n"), consul.DefaultMaxDocumentBytes/4+1), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{{fifo, "not a regular file"}, {big, "limit"}} {
		var out, errOut bytes.Buffer
		done := make(chan int, 1)
		go func() {
			done <- realMain([]string{"plan", "-config", file, "-admin", "127.0.0.1:1", "-kv-key", "xds-bridge/policy/x.hcl", tc.file}, &out, &errOut)
		}()
		select {
		case code := <-done:
			if code != 1 || !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("plan -kv-key %s: exit %d, stderr %q; want 1 saying %q", filepath.Base(tc.file), code, errOut.String(), tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("plan -kv-key %s still running after 10 s: the read blocks", filepath.Base(tc.file))
		}
	}
}
