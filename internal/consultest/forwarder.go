package consultest

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Forwarder is a TCP proxy to a fixed target that a test can cut and restore,
// e.g. to simulate losing the connection to Consul. It is safe for
// concurrent use.
type Forwarder struct {
	t      testing.TB
	target string
	addr   string

	mu  sync.Mutex
	cur *fwdSession // nil while stopped
}

// fwdSession is one Start..Stop period: its listener and the connections it
// accepted. A fresh one per Start keeps a Stop from waiting on, or resetting,
// connections of a later Start.
type fwdSession struct {
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// NewForwarder starts forwarding connections on a random 127.0.0.1 port to
// target. It is stopped on test cleanup.
func NewForwarder(t testing.TB, target string) *Forwarder {
	t.Helper()
	ln, err := listenOutsideEphemeral()
	if err != nil {
		t.Fatalf("consultest: forwarder listen: %v", err)
	}
	f := &Forwarder{t: t, target: target, addr: ln.Addr().String()}
	f.serve(ln)
	t.Cleanup(f.Stop)
	return f
}

// Addr returns the forwarder's listen address, the same across Stop and Start.
func (f *Forwarder) Addr() string { return f.addr }

// Stop closes the listener, so new connections are refused, and resets every
// live connection on both sides, so clients see an error rather than a hang
// or a clean EOF. It returns once all forwarding has ended. Stopping a
// stopped Forwarder does nothing.
func (f *Forwarder) Stop() {
	f.mu.Lock()
	s := f.cur
	f.cur = nil
	f.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	s.ln.Close()
	for c := range s.conns {
		reset(c)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Start listens again on the same address after Stop. It fails the test if
// the address cannot be had back within a few seconds, so call it from the
// test goroutine. Starting a running Forwarder does nothing.
func (f *Forwarder) Start() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur != nil {
		return
	}
	// Go sets SO_REUSEADDR on listeners, so TIME_WAIT leftovers do not block
	// the port; retrying covers another process briefly holding it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err := net.Listen("tcp", f.addr)
		if err == nil {
			f.serveLocked(ln)
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("consultest: forwarder relisten on %s: %v", f.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// listenOutsideEphemeral listens on a free 127.0.0.1 port below the
// kernel's ephemeral range, so that while the forwarder is stopped no
// other listener asking for any port (port 0: every other test's, in
// other packages running at once) is given its port, which Start must
// have back (CI once failed so). Ports from 0 as a fallback.
func listenOutsideEphemeral() (net.Listener, error) {
	low := 32768 // Linux's default when the range cannot be read
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	if low > 12000 {
		for range 50 {
			port := low - 1 - rand.IntN(10000)
			if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				return ln, nil
			}
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

func (f *Forwarder) serve(ln net.Listener) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.serveLocked(ln)
}

func (f *Forwarder) serveLocked(ln net.Listener) {
	s := &fwdSession{ln: ln, conns: make(map[net.Conn]struct{})}
	f.cur = s
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors
				continue
			}
			if !s.track(c) {
				reset(c)
				continue
			}
			s.wg.Add(1)
			go s.pipe(c, f.target)
		}
	}()
}

func (s *fwdSession) pipe(client net.Conn, target string) {
	defer s.wg.Done()
	defer s.untrack(client)
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil || !s.track(up) {
		if up != nil {
			reset(up)
		}
		reset(client)
		return
	}
	defer s.untrack(up)
	done := make(chan struct{})
	go func() {
		copyHalf(up, client)
		close(done)
	}()
	copyHalf(client, up)
	<-done
	client.Close()
	up.Close()
}

// copyHalf copies one direction and then half-closes it, so a peer that shuts
// down its write side still gets its reply.
func copyHalf(dst, src net.Conn) {
	io.Copy(dst, src)
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}

func (s *fwdSession) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *fwdSession) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// reset closes c with an RST instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}
