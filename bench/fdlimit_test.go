package bench

import (
	"syscall"
	"testing"
)

// TestRaiseFileLimit: the soft limit rises to what was asked (up to the
// hard limit, which any process may), and a limit already higher stays.
func TestRaiseFileLimit(t *testing.T) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l) })
	// Go raises the soft limit to the hard one at start; lower it to see
	// the raise.
	low := syscall.Rlimit{Cur: min(l.Cur, 1024), Max: l.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	want := min(l.Max, 4096)
	got, err := RaiseFileLimit(want)
	var now syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now)
	if err != nil || got != want || now.Cur != want {
		t.Fatalf("RaiseFileLimit(%d) = %d, %v; limit now %d", want, got, err, now.Cur)
	}
	if got, err := RaiseFileLimit(16); err != nil || got != want {
		t.Errorf("a smaller ask lowered or failed: %d, %v; want %d kept", got, err, want)
	}
}
