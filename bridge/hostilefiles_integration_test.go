package bridge_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/procstat"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// hostileFiles makes the files of issue 36 in dir: a FIFO (no writer
// ever), a 1 GB sparse file, a JWKS over policy.MaxJWKSFileBytes; and
// names /dev/zero.
func hostileFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sparse := filepath.Join(dir, "sparse")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	big := filepath.Join(dir, "big-jwks.json")
	key := `{"kty":"oct","k":"` + strings.Repeat("A", 1000) + `"},`
	if err := os.WriteFile(big, []byte(`{"keys":[`+strings.Repeat(key, 2*policy.MaxJWKSFileBytes/len(key))+`{"kty":"oct","k":"AA"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"/dev/zero": "/dev/zero", "a FIFO": fifo, "a 1 GB sparse file": sparse, "a JWKS over the limit": big}
}

// rssBytes is this process's resident set size (the bridge runs in it).
func rssBytes(t *testing.T) int64 {
	t.Helper()
	n, err := procstat.RSS(0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// healthFlipper flips web-1's TTL check and checks that c sees it within
// 1s of the Consul write (as TestHostileInputKeepsHealthFlowing does).
type healthFlipper struct {
	agent   *consultest.Agent
	c       *adsclient.Client
	healthy bool
}

func (f *healthFlipper) flip(t *testing.T) {
	t.Helper()
	state, want := "critical", ep(1001, "UNHEALTHY")
	if !f.healthy {
		state, want = "passing", ep(1001, "HEALTHY")
	}
	f.healthy = !f.healthy
	start := time.Now()
	f.agent.SetTTL(t, "service:web-1", state)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := f.c.Wait(ctx, func(s adsclient.State) bool {
		for _, e := range s.Endpoints("web") {
			if strings.HasSuffix(e.Address, ":1001") {
				return summary([]adsclient.Endpoint{e}) == want
			}
		}
		return false
	}); err != nil {
		t.Fatalf("the proxy connected throughout never saw the health flip: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("health flip took %v to reach the proxy, want within 1s", took)
	}
}

// TestHostileFilesNamedInKV: a KV document naming /dev/zero, a FIFO, a
// 1 GB sparse file or an oversized JWKS as a cert_file or a jwks_file is
// rejected at once with a diagnostic at the attribute (consul key, line,
// column), the last good policy keeps serving, a health flip still
// reaches a proxy within 1s, and the bridge's memory stays under twice
// its idle size.
func TestHostileFilesNamedInKV(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	const prefix = "xds-bridge/policy/"
	kv := agent.Client().KV()
	put := func(t *testing.T, key, val string) {
		t.Helper()
		if _, err := kv.Put(&api.KVPair{Key: prefix + key, Value: []byte(val)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put(t, "base.hcl", "export_all_services = true\n")
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.Settings.Consul.KVPrefix = prefix
	})
	good := dial(t, h, adsclient.Delta, nil)
	waitEndpoints(t, "web", ep(1001, "HEALTHY"), good)
	fl := &healthFlipper{agent: agent, c: good, healthy: true}
	fl.flip(t)
	fl.flip(t)
	idle := rssBytes(t)
	t.Logf("idle RSS %d MB", idle>>20)

	certDoc := func(path string) string {
		return "proxy \"edge\" {\n  listener \"https\" {\n    port = 8443\n    tls {\n      certificate \"c\" {\n        cert_file = \"" + path +
			"\"\n        key_file  = \"" + path + "\"\n      }\n    }\n    virtual_host \"v\" {\n      domains = [\"*\"]\n      route {\n        service = \"web\"\n      }\n    }\n  }\n}\n"
	}
	jwksDoc := func(path string) string {
		return "proxy \"edge\" {\n  listener \"l\" {\n    port = 8080\n    jwt_provider \"p\" {\n      issuer = \"a\"\n      jwks_file = \"" + path +
			"\"\n    }\n    virtual_host \"v\" {\n      route {\n        service = \"web\"\n      }\n    }\n  }\n}\n"
	}
	failed := 0
	for what, path := range hostileFiles(t, t.TempDir()) {
		for _, tc := range []struct {
			attr, doc, want string
		}{
			{"cert_file", certDoc(path), "xds-bridge/policy/hostile.hcl:6:21: Cannot read certificate file: " + path + ": "},
			{"jwks_file", jwksDoc(path), "xds-bridge/policy/hostile.hcl:6:19: Cannot read JWKS file: " + path + ": "},
		} {
			if what == "a JWKS over the limit" && tc.attr == "cert_file" {
				continue
			}
			t.Run(tc.attr+" names "+what, func(t *testing.T) {
				put(t, "hostile.hcl", tc.doc)
				failed++
				deadline := time.Now().Add(10 * time.Second)
				for {
					st := h.daemon.Policy()
					if st.FailedReloads >= failed && st.LastError != nil {
						if got := strings.Join(st.LastError.Diagnostics, "\n"); !strings.Contains(got, tc.want) {
							t.Fatalf("diagnostics:\n%s\nwant one beginning %q", got, tc.want)
						}
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("no rejection within 10s; status %+v", st)
					}
					time.Sleep(20 * time.Millisecond)
				}
				fl.flip(t)
				if rss := rssBytes(t); rss > 2*idle {
					t.Fatalf("RSS %d MB, over twice the idle %d MB", rss>>20, idle>>20)
				}
				if _, err := kv.Delete(prefix+"hostile.hcl", nil); err != nil {
					t.Fatal(err)
				}
				fl.flip(t)
			})
		}
	}
}

// TestHostileKVStateFile: consul.state_dir's kv-policy.json replaced by a
// link to /dev/zero, a FIFO or a 1 GB sparse file is read at start (a KV
// document is broken, so the bridge looks for its last accepted version):
// it is ignored at once with an error, the bridge says why it is not
// ready, and serves (a health flip within 1s) as soon as the document is
// fixed, with its memory under twice the idle size.
func TestHostileKVStateFile(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	const prefix = "xds-bridge/policy/"
	kv := agent.Client().KV()
	files := hostileFiles(t, t.TempDir())
	idle := rssBytes(t)
	for _, what := range []string{"/dev/zero", "a FIFO", "a 1 GB sparse file"} {
		t.Run(what, func(t *testing.T) {
			state := t.TempDir()
			if err := os.Symlink(files[what], filepath.Join(state, "kv-policy.json")); err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(&api.KVPair{Key: prefix + "base.hcl", Value: []byte("export_all_services = \n")}, nil); err != nil {
				t.Fatal(err)
			}
			h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
				c.Settings.Consul.KVPrefix = prefix
				c.Settings.Consul.StateDir = state
			})
			deadline := time.Now().Add(10 * time.Second)
			for st := h.daemon.Policy(); !strings.Contains(st.Waiting, "rejected at start"); st = h.daemon.Policy() {
				if time.Now().After(deadline) {
					t.Fatalf("no rejection at start within 10s; status %+v", st)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if _, err := kv.Put(&api.KVPair{Key: prefix + "base.hcl", Value: []byte("export_all_services = true\n")}, nil); err != nil {
				t.Fatal(err)
			}
			good := dial(t, h, adsclient.Delta, nil)
			waitEndpoints(t, "web", ep(1001, "HEALTHY"), good)
			fl := &healthFlipper{agent: agent, c: good, healthy: true}
			fl.flip(t)
			fl.flip(t)
			if rss := rssBytes(t); rss > 2*idle {
				t.Fatalf("RSS %d MB, over twice the idle %d MB", rss>>20, idle>>20)
			}
		})
	}
}
