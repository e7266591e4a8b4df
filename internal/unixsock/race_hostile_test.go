package unixsock

import (
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

const envDialPath = "UNIXSOCK_HOSTILE_DIAL"

// TestHostileDialer is the child of TestNoConnectBeforeTheMode: as
// another user it dials the path in a loop and prints CONNECTED once the
// kernel lets it in. It skips otherwise.
func TestHostileDialer(t *testing.T) {
	path := os.Getenv(envDialPath)
	if path == "" {
		t.Skip("the child process of TestNoConnectBeforeTheMode")
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if c, err := net.Dial("unix", path); err == nil {
			os.Stdout.WriteString("CONNECTED\n")
			c.Close()
			os.Exit(0)
		}
	}
	os.Exit(0)
}

// TestNoConnectBeforeTheMode: with a umask that lets everyone write
// (0), a socket listened on again and again with mode 0600 must never
// take a connection from another user (uid 65534 dialling in a loop). It
// did when the mode was set after bind: a peer that connected in between
// was queued, and accepted (the kernel checks the mode at connect). Needs
// root, to run the dialer as another user.
func TestNoConnectBeforeTheMode(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; this test needs it to dial as another user")
		}
		t.Skip("needs root to dial as another user")
	}
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	// A directory the other user may traverse, holding the socket and a
	// copy of this test binary it can run.
	dir, err := os.MkdirTemp("", "unixsock-race-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "dialer.test")
	if err := copyExecutable(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "x.sock")
	var out bytes.Buffer
	child := exec.Command(bin, "-test.run=^TestHostileDialer$")
	child.Env = append(os.Environ(), envDialPath+"="+path)
	child.Stdout = &out
	child.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	accepted := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		lis, err := Listen(path, 0o600, "")
		if err != nil {
			t.Fatal(err)
		}
		ul := lis.(*listener).UnixListener
		_ = ul.SetDeadline(time.Now().Add(time.Millisecond))
		if c, err := lis.Accept(); err == nil {
			accepted++
			c.Close()
		}
		lis.Close()
	}
	_ = child.Process.Kill()
	_ = child.Wait()
	if accepted > 0 || bytes.Contains(out.Bytes(), []byte("CONNECTED")) {
		t.Fatalf("another user connected to a 0600 socket (%d accepted; dialer said %q)", accepted, out.String())
	}
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
