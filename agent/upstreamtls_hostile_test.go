package agent

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestUpstreamCAFileReadBounded: the CA the agent verifies the central
// bridges with is read on each dial; a FIFO in its place is refused at
// once, naming the setting, instead of holding the relay's dial forever.
func TestUpstreamCAFileReadBounded(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ca.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	a := &Agent{cfg: &Config{TLS: UpstreamTLS{CAFile: fifo}}}
	done := make(chan error, 1)
	go func() {
		_, err := a.upstreamTLS("127.0.0.1:1")
		done <- err
	}()
	select {
	case err := <-done:
		if want := "upstream tls ca_file: read " + fifo + ": not a regular file (a FIFO)"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want %q", err, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still reading after 5 s: the read waits on the FIFO")
	}
}
