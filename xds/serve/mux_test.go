package serve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
)

// countingPool hands out buffers and counts those not yet returned.
type countingPool struct{ out int }

func (p *countingPool) Get(n int) *[]byte { p.out++; b := make([]byte, n); return &b }
func (p *countingPool) Put(*[]byte)       { p.out-- }

// readyReader is gRPC's readyreader.Reader (internal): a connection that
// has it gets pooled read buffers instead of a 32 KiB bufio.Reader each.
type readyReader interface {
	ReadOnReady(bufSize int, pool mem.BufferPool) (*[]byte, int, error)
}

// TestPeekedConnReadsOnReady: a plaintext connection through portMux
// replays the classified bytes, then reads the socket into pooled buffers
// only once data has arrived, and holds none while idle or closed.
func TestPeekedConnReadsOnReady(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	client, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if _, err := client.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nhello")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(server, 4096)
	if _, err := br.Peek(len(http2Preface) + 5); err != nil {
		t.Fatal(err)
	}
	pc := newPeekedConn(server, br)
	var rr readyReader = pc // gRPC detects the method by this interface
	if pc.raw == nil {
		t.Fatal("plaintext TCP connection: want raw reads")
	}
	pool := &countingPool{}
	var got []byte
	read := func() error {
		b, n, err := rr.ReadOnReady(64, pool)
		if n > 0 {
			got = append(got, (*b)[:n]...)
			pool.Put(b)
		}
		return err
	}
	for len(got) < len(http2Preface)+5 {
		if err := read(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.Write([]byte(" world")); err != nil {
		t.Fatal(err)
	}
	for len(got) < len(http2Preface)+11 {
		if err := read(); err != nil {
			t.Fatal(err)
		}
	}
	if want := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nhello world"; !bytes.Equal(got, []byte(want)) {
		t.Fatalf("read %q, want %q", got, want)
	}
	client.Close()
	if err := read(); err != io.EOF {
		t.Fatalf("after the peer closed: %v, want EOF", err)
	}
	if pool.out != 0 {
		t.Fatalf("%d buffers not returned to the pool", pool.out)
	}
}

// failingListener fails its first accepts with err, then accepts.
type failingListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
	err   error
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, l.err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// serveOn runs a Server on lis and returns its log and Serve's result.
func serveOn(t *testing.T, lis net.Listener) (*syncbuffer.Buffer, context.CancelFunc, <-chan error) {
	t.Helper()
	logs := &syncbuffer.Buffer{}
	s := NewServer(ServerConfig{Logger: zerolog.New(logs), ShutdownGrace: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	return logs, cancel, done
}

// TestOutOfFileDescriptorsKeepsThePortOpen: accepts failing with EMFILE
// (a fleet past the open-file limit) pause accepting, with one warning
// for the spell, while the connections already open keep being served,
// and the port then serves the next connection; it used to close the
// port and stop the server.
func TestOutOfFileDescriptorsKeepsThePortOpen(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var pauses []time.Duration
	old := acceptPause
	acceptPause = func(d time.Duration) { mu.Lock(); pauses = append(pauses, d); mu.Unlock() }
	t.Cleanup(func() { acceptPause = old })
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	lis := &failingListener{Listener: inner, err: emfile}
	logs, cancel, done := serveOn(t, lis)
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	check := func(what string) *grpc.ClientConn {
		conn, err := grpc.NewClient(inner.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("health check %s: %v; want the port to serve", what, err)
		}
		return conn
	}
	before := check("before the failed accepts")
	// The accept under way takes the next connection; the ten after it
	// fail.
	lis.mu.Lock()
	lis.fails = 10
	lis.mu.Unlock()
	check("that the accept under way took")
	check("after the failed accepts")
	if _, err := healthpb.NewHealthClient(before).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("the connection open before the failed accepts: %v; want it still served", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Serve returned during the failed accepts: %v", err)
	default:
	}
	mu.Lock()
	got := slices.Clone(pauses)
	mu.Unlock()
	ms := time.Millisecond
	if want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second}; !slices.Equal(got, want) {
		t.Errorf("pauses after 10 failed accepts: %v, want %v (doubling from 5 ms to 1 s)", got, want)
	}
	if n := strings.Count(logs.String(), "cannot accept connections"); n != 1 {
		t.Errorf("%d warnings for one spell of failed accepts, want 1; log:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "too many open files") {
		t.Errorf("the warning does not carry the accept's error; log:\n%s", logs.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after a clean stop: %v", err)
	}
}

// TestAcceptFailureEndsServeWithItsError: an accept error that will not
// pass ends Serve with that error, not the closed listener it leaves.
func TestAcceptFailureEndsServeWithItsError(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	_, cancel, done := serveOn(t, &failingListener{Listener: inner, fails: 1, err: errors.New("listener broken")})
	defer cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "accepting on") || !strings.Contains(err.Error(), "listener broken") {
			t.Errorf("Serve = %v, want the accept's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not end")
	}
}
