package bridge

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
)

// TestLoopConsulReloadKeepsFilesAsRead: a reload Consul triggers (here a
// KV document) merges the configuration files as last read, not as they
// are on disk at that moment. An editor's or config manager's write is
// truncate-then-write; read half-way, a policy file is often still valid
// HCL (empty, or cut after a block) and would withdraw proxies until the
// write ends. The file watcher reloads once writes settle, SIGHUP at
// once; both read the disk. Found as a flaky
// TestUntranslatableConfigEntryRejectedAlone: a config-entry change read
// the test's policy file mid-write and the files proxy's routes were
// withdrawn for one build.
func TestLoopConsulReloadKeepsFilesAsRead(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.hcl")
	write := func(src string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const full = `export_all_services = true
proxy "files" {
  listener "web" {
    port = 8443
    virtual_host "web" {
      domains = ["web.example.com"]
      route {
        service = "web"
      }
    }
  }
}
`
	write(full)
	h := startLoopWith(t, func(c *Config, l *loop) {
		c.ConfigFiles = []string{file}
		c.Policy = mergedPolicy(t, full).Policy // as the command loads it
		l.policy = c.Policy
	})
	loaded := func() time.Time { return h.d.Policy().LoadedAt }
	// built is whether the last world serves web on port.
	built := func(port uint32) bool {
		w := h.world.Load()
		if w == nil {
			return false
		}
		for _, c := range w.Model.Clusters {
			for _, e := range c.Endpoints {
				if e.Port == port {
					return true
				}
			}
		}
		return false
	}
	h.send(8001)
	h.eventually("the first build", func() bool { return built(8001) })

	groups := func() int {
		w := h.world.Load()
		if w == nil {
			return -1
		}
		return len(w.Model.Groups)
	}
	h.eventually("the files proxy's group", func() bool { return groups() == 1 })

	// The file is mid-write (empty: a valid policy without the proxy)
	// when a KV document changes.
	write("")
	before := loaded()
	h.clock.Advance(time.Second)
	select {
	case h.kv <- consul.KVUpdate{Documents: []consul.KVDocument{{Key: "xds/extra.hcl", Value: []byte("# nothing yet\n")}}}:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not take the KV update")
	}
	h.eventually("the KV reload", func() bool { return loaded().After(before) })
	h.clock.Advance(h.d.cfg.Settings.XDS.DebounceHoldOff)
	h.send(8002)
	h.eventually("the next build", func() bool { return built(8002) })
	if n := groups(); n != 1 {
		t.Fatalf("after a KV reload with the file mid-write: %d proxy groups served, want the files proxy's (the file as last read)", n)
	}

	// The watcher's (or SIGHUP's) reload reads the file as it now is.
	before = loaded()
	h.clock.Advance(time.Second)
	h.d.Reload()
	h.eventually("the file reload", func() bool { return loaded().After(before) })
	h.clock.Advance(h.d.cfg.Settings.XDS.DebounceHoldOff)
	h.send(8003)
	h.eventually("the world without the files proxy", func() bool { return built(8003) && groups() == 0 })
}
