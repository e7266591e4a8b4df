// Package hostilefile gives tests the files a careless or hostile setting
// may name instead of a regular file, and a way to see a read of one
// refused rather than waited on.
package hostilefile

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// FIFO makes a named pipe no one ever writes to, named name in a
// temporary directory: an open or read of it without O_NONBLOCK waits
// forever.
func FIFO(t testing.TB, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Refused runs read and fails the test unless it returns, within 5 s, an
// error containing want: a read that waits on a FIFO fails the test by
// the deadline (its goroutine is left behind) instead of hanging it.
func Refused(t testing.TB, what, want string, read func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- read() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: err = %v, want one saying %q", what, err, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still running after 5 s: the read waits", what)
	}
}
