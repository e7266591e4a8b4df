package main

import (
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// openPTY opens a pseudo-terminal: the terminal end a program writes to,
// and the master end that reads what it wrote.
func openPTY(t *testing.T) (tty, master *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlocking the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Skipf("naming the pseudo-terminal: %v", err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("opening the pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return tty, master
}

// readSome returns what r has to read within a few seconds: one log line.
func readSome(t *testing.T, r io.Reader) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		n, _ := r.Read(buf)
		got <- string(buf[:n])
	}()
	select {
	case s := <-got:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("nothing logged")
		return ""
	}
}

// TestConsoleLogColours: the console format colours its lines on a
// terminal (docs/operations/logs-and-metrics.md), not into a pipe nor
// with $NO_COLOR set, and redacts a secret in all three.
func TestConsoleLogColours(t *testing.T) {
	const secret = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJicmlkZ2UifQ"
	logTo := func(t *testing.T, w io.Writer) {
		t.Helper()
		log, err := newLogger(policy.LogSettings{Level: "info", Format: "console"}, w)
		if err != nil {
			t.Fatal(err)
		}
		log.Warn().Str("domain", secret).Msg("token " + secret)
	}
	check := func(t *testing.T, out string, wantColour bool) {
		t.Helper()
		if colour := strings.Contains(out, "\x1b["); colour != wantColour {
			t.Errorf("colours %v, want %v: %q", colour, wantColour, out)
		}
		if strings.Contains(out, "eyJ") || strings.Count(out, policy.Redacted) != 2 {
			t.Errorf("secret not redacted: %q", out)
		}
	}

	t.Run("terminal", func(t *testing.T) {
		tty, master := openPTY(t)
		logTo(t, tty)
		check(t, readSome(t, master), true)
	})
	t.Run("pipe", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		logTo(t, w)
		check(t, readSome(t, r), false)
	})
	t.Run("terminal with NO_COLOR", func(t *testing.T) {
		t.Setenv("NO_COLOR", "")
		tty, master := openPTY(t)
		logTo(t, tty)
		check(t, readSome(t, master), false)
	})
}
