package unixsock

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestListenSetsModeAndGroupAndReplacesStaleSockets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.sock")
	gid := os.Getgid()
	for range 2 { // the second Listen replaces the first's socket file
		lis, err := Listen(path, 0o640, "")
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o640 || int(fi.Sys().(*syscall.Stat_t).Gid) != gid {
			t.Fatalf("mode %v gid %d", fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Gid)
		}
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		// Leave the socket file behind as a crash would.
		lis.(*listener).UnixListener.Close()
	}
	if _, err := Listen(path, 0, "no-such-group-xyz"); err == nil || !strings.Contains(err.Error(), "no-such-group-xyz") {
		t.Fatalf("unknown group: %v", err)
	}
	regular := filepath.Join(t.TempDir(), "file")
	os.WriteFile(regular, nil, 0o600)
	if _, err := Listen(regular, 0, ""); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("a regular file in the way: %v, want a refusal (never deleted)", err)
	}
	if _, err := ParseMode("0999"); err == nil {
		t.Fatal("mode 0999 accepted")
	}
}
