package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// notifySocket listens where systemd would ($NOTIFY_SOCKET) and returns
// the datagrams the process sends there.
func notifySocket(t *testing.T) (path string, msgs <-chan string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch := make(chan string, 1000)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(ch)
				return
			}
			ch <- string(buf[:n])
		}
	}()
	return path, ch
}

// waitFor returns the messages read until one contains want.
func waitFor(t *testing.T, msgs <-chan string, want string, within time.Duration) []string {
	t.Helper()
	var seen []string
	deadline := time.After(within)
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("notify socket closed before %q; got %q", want, seen)
			}
			seen = append(seen, m)
			if strings.Contains(m, want) {
				return seen
			}
		case <-deadline:
			t.Fatalf("no %q within %v; got %q", want, within, seen)
		}
	}
}

// TestNotifySystemd plays systemd: READY=1 only once the daemon says it
// is ready (never before its listeners are open), STATUS= with the
// reason until then, watchdog pings at half the interval, STOPPING=1 at
// the end.
func TestNotifySystemd(t *testing.T) {
	path, msgs := notifySocket(t)
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))

	var reason atomic.Value
	reason.Store("waiting for the first complete Consul sync: 127.0.0.1:1: connection refused")
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		notifySystemd(ctx, zerolog.New(zerolog.NewTestWriter(t)), started, func() string { return reason.Load().(string) })
		close(done)
	}()

	// Not started: no readiness, no watchdog.
	waitFor(t, msgs, "STATUS=starting", time.Second)
	select {
	case m := <-msgs:
		t.Fatalf("sent %q before the listeners were open", m)
	case <-time.After(300 * time.Millisecond):
	}
	close(started)
	seen := waitFor(t, msgs, "STATUS=waiting for the first complete Consul sync: 127.0.0.1:1", time.Second)
	waitFor(t, msgs, "WATCHDOG=1", time.Second)
	time.Sleep(300 * time.Millisecond)
	reason.Store("")
	seen = append(seen, waitFor(t, msgs, "READY=1", time.Second)...)
	for _, m := range seen[:len(seen)-1] {
		if strings.Contains(m, "READY=1") {
			t.Fatalf("READY=1 before the daemon was ready: %q", seen)
		}
	}
	// The watchdog keeps being fed, every 100ms (half of 200ms) or so.
	start := time.Now()
	for range 3 {
		waitFor(t, msgs, "WATCHDOG=1", 400*time.Millisecond)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("3 watchdog pings took %v", d)
	}
	cancel()
	waitFor(t, msgs, "STOPPING=1", time.Second)
	<-done
}

// TestNotifySystemdOutsideSystemd: without $NOTIFY_SOCKET it returns at
// once and never asks for readiness.
func TestNotifySystemdOutsideSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	os.Unsetenv("NOTIFY_SOCKET")
	done := make(chan struct{})
	go func() {
		notifySystemd(context.Background(), zerolog.Nop(), nil, func() string { t.Error("asked for readiness"); return "" })
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("notifySystemd did not return without $NOTIFY_SOCKET")
	}
}
