package boundedread

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadDeadline: a read that hangs (a hung network file
// system) is abandoned at the context's deadline, or Timeout's,
// and reported with the path; the caller is not held.
func TestReadDeadline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	stall := func() { <-release }
	stallRead.Store(&stall)
	t.Cleanup(func() { stallRead.Store(nil); close(release) })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Read(ctx, path, 10)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("returned after %v, want at the 100ms deadline", took)
	}
	if !errors.Is(err, ErrReadTimeout) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want ErrReadTimeout naming %s", err, path)
	}
}
