package agent_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/procstat"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

func rss(t *testing.T) int64 {
	t.Helper()
	n, err := procstat.RSS(0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAgentHostileStateFiles: the agent's state files in data_dir (a
// key's last good config, the saved sidecar registrations) replaced by
// links to /dev/zero, a FIFO or a 1 GB sparse file are ignored at start
// with a warning, never read: the agent starts, relays, and a health flip
// reaches a local proxy within 1s, with memory under twice the idle size.
func TestAgentHostileStateFiles(t *testing.T) {
	ca := consultest.Start(t)
	ca.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	cen := startCentral(t, ca.HTTPAddr(), freeAddr(t))
	files := t.TempDir()
	fifo := filepath.Join(files, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sparse := filepath.Join(files, "sparse")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	idle := rss(t)
	for what, target := range map[string]string{"/dev/zero": "/dev/zero", "a FIFO": fifo, "a 1 GB sparse file": sparse} {
		t.Run(what, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			if err := os.MkdirAll(data, 0o700); err != nil {
				t.Fatal(err)
			}
			// The state file of key "web" (store.file's naming) and the
			// sidecar registrations.
			h := sha256.Sum256([]byte("web"))
			for _, name := range []string{"node-" + hex.EncodeToString(h[:8]) + ".pb", "sidecars.json"} {
				if err := os.Symlink(target, filepath.Join(data, name)); err != nil {
					t.Fatal(err)
				}
			}
			started := make(chan *runningAgent, 1)
			go func() { started <- startAgent(t, dir, cen.addr) }()
			var ag *runningAgent
			select {
			case ag = <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("the agent did not start within 10s")
			}
			proxy := dial(t, "unix://"+ag.SocketAddr().String(), "web", adsclient.Delta)
			wait(t, proxy, "web endpoints", 15*time.Second, func(s adsclient.State) bool { return health(s, "web") == "127.0.0.1:1001=HEALTHY" })
			for _, state := range []string{"critical", "passing"} {
				want := map[string]string{"critical": "127.0.0.1:1001=UNHEALTHY", "passing": "127.0.0.1:1001=HEALTHY"}[state]
				start := time.Now()
				ca.SetTTL(t, "service:web-1", state)
				wait(t, proxy, "the flip", 15*time.Second, func(s adsclient.State) bool { return health(s, "web") == want })
				if took := time.Since(start); took > time.Second {
					t.Fatalf("health flip through the agent took %v, want within 1s", took)
				}
			}
			if r := rss(t); r > 2*idle {
				t.Fatalf("RSS %d MB, over twice the idle %d MB", r>>20, idle>>20)
			}
		})
	}
}
