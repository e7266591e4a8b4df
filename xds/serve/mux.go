package serve

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/mem"
)

// portMux serves gRPC and HTTP/1.1 (REST-JSON xDS) on the one xDS port, so
// the one bootstrap cluster that points at the bridge serves both. It
// terminates TLS itself (when configured) and looks at the first bytes of
// each connection: the HTTP/2 connection preface goes to the gRPC server,
// anything else to the REST handler. A connection that finishes neither
// its TLS handshake nor its first bytes within handshakeTimeout is
// dropped, as gRPC's ConnectionTimeout did before.
type portMux struct {
	lis      net.Listener
	tls      *tls.Config
	log      zerolog.Logger
	grpc     *chanListener
	http     *chanListener
	timeout  time.Duration
	closeErr sync.Once
}

// handshakeTimeout is a variable for tests only.
var handshakeTimeout = 5 * time.Second

// acceptPause is how run pauses after a failed accept (a variable for
// tests, which record the pauses).
var acceptPause = time.Sleep

var http2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

func newPortMux(lis net.Listener, tlsCfg *tls.Config, log zerolog.Logger) *portMux {
	return &portMux{
		lis: lis, tls: tlsCfg, log: log, timeout: handshakeTimeout,
		grpc: newChanListener(lis.Addr()), http: newChanListener(lis.Addr()),
	}
}

// run accepts until the listener closes; each connection is classified on
// its own goroutine so a slow client never holds up the next one. A
// failed accept that may pass (temporary: out of file descriptors, when
// a fleet outgrows the open-file limit or a flood fills it) pauses
// accepting, from 5 ms doubling to 1 s as net/http and gRPC's own Serve
// do, and every connection already served goes on: it used to close the
// xDS port, and with it every proxy's stream. One warning per spell of
// failures. Any other error is returned (the caller closes the port).
func (m *portMux) run() error {
	var delay time.Duration
	for {
		c, err := m.lis.Accept()
		if err != nil {
			if !temporary(err) {
				return err
			}
			if delay == 0 {
				m.log.Warn().Err(err).Str("addr", m.lis.Addr().String()).
					Msg("xDS port cannot accept connections; retrying (for too many open files, raise the limit: ulimit -n, systemd LimitNOFILE)")
			}
			delay = min(max(2*delay, minAcceptDelay), maxAcceptDelay)
			acceptPause(delay)
			continue
		}
		delay = 0
		go m.classify(c)
	}
}

// The pause after a failed accept (run).
const (
	minAcceptDelay = 5 * time.Millisecond
	maxAcceptDelay = time.Second
)

// temporary is whether a failed accept may pass (EMFILE, ENFILE,
// ECONNABORTED...). net.Error's Temporary is deprecated for errors in
// general, and still how the standard library's servers judge accepts.
func temporary(err error) bool {
	var te interface{ Temporary() bool }
	return !errors.Is(err, net.ErrClosed) && errors.As(err, &te) && te.Temporary()
}

func (m *portMux) classify(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(m.timeout))
	conn := c
	if m.tls != nil {
		tc := tls.Server(c, m.tls)
		if err := tc.HandshakeContext(context.Background()); err != nil {
			m.log.Debug().Err(err).Str("remote", c.RemoteAddr().String()).Msg("xDS TLS handshake failed")
			c.Close()
			return
		}
		conn = tc
	}
	// Byte by byte against the preface, so a short HTTP/1.1 request is
	// not held waiting for 24 bytes it will never send.
	br := bufio.NewReaderSize(conn, 4096)
	dst := m.grpc
	for i := 1; i <= len(http2Preface); i++ {
		head, err := br.Peek(i)
		if err != nil {
			conn.Close()
			return
		}
		if !bytes.Equal(head, http2Preface[:i]) {
			dst = m.http
			break
		}
	}
	_ = c.SetDeadline(time.Time{})
	pc := newPeekedConn(conn, br)
	if !dst.deliver(pc) {
		conn.Close()
	}
}

// Close stops both sides and the underlying listener.
func (m *portMux) Close() error {
	var err error
	m.closeErr.Do(func() {
		err = m.lis.Close()
		m.grpc.Close()
		m.http.Close()
	})
	return err
}

// peekedConn replays the bytes read while classifying, then reads the
// connection itself. For gRPC it still exposes the TLS state (see
// handshakenCreds).
//
// It also implements gRPC's ReadOnReady (grpc/internal/transport/
// readyreader): on a plaintext socket gRPC then takes a read buffer from
// its pool only once bytes have arrived and returns it when they are
// parsed, as it does for a bare *net.TCPConn. Without it gRPC wraps any
// other net.Conn in a 32 KiB bufio.Reader held for the connection's life,
// which with the 4 KiB classification buffer was ~36 of every idle
// proxy's ~71 KiB of heap (issue 16, bench/README).
type peekedConn struct {
	net.Conn
	head []byte          // classified bytes not yet read
	raw  syscall.RawConn // the socket, for plaintext connections
	// doRead is the raw read callback and rs its state, kept here so a
	// read allocates nothing.
	doRead func(fd uintptr) bool
	rs     rawRead
}

type rawRead struct {
	pool mem.BufferPool
	size int
	buf  *[]byte
	n    int
	err  error
}

func newPeekedConn(conn net.Conn, br *bufio.Reader) *peekedConn {
	head, _ := br.Peek(br.Buffered())
	pc := &peekedConn{Conn: conn, head: bytes.Clone(head)}
	if _, isTLS := conn.(*tls.Conn); !isTLS && rawReads {
		if sc, ok := conn.(syscall.Conn); ok {
			if raw, err := sc.SyscallConn(); err == nil {
				pc.raw = raw
				pc.doRead = pc.readFD
			}
		}
	}
	return pc
}

func (p *peekedConn) Read(b []byte) (int, error) {
	if len(p.head) > 0 {
		n := copy(b, p.head)
		p.head = p.head[n:]
		if len(p.head) == 0 {
			p.head = nil
		}
		return n, nil
	}
	return p.Conn.Read(b)
}

// ReadOnReady waits for data, then reads up to bufSize bytes into a buffer
// from pool, which the caller returns to it. Only a TLS connection (whose
// records tls.Conn buffers itself) blocks holding the buffer.
func (p *peekedConn) ReadOnReady(bufSize int, pool mem.BufferPool) (*[]byte, int, error) {
	if len(p.head) > 0 || p.raw == nil {
		buf := pool.Get(bufSize)
		n, err := p.Read(*buf)
		if n == 0 {
			pool.Put(buf)
			return nil, 0, err
		}
		return buf, n, err // the caller uses the n bytes before the error
	}
	p.rs = rawRead{pool: pool, size: bufSize}
	err := p.raw.Read(p.doRead)
	r := p.rs
	p.rs = rawRead{}
	switch {
	case err != nil:
		if r.buf != nil {
			pool.Put(r.buf)
		}
		return nil, 0, err
	case r.err != nil:
		return nil, 0, r.err // its buffer went back in readFD
	case r.n == 0:
		pool.Put(r.buf)
		return nil, 0, io.EOF // a read of 0 is the peer closing
	}
	return r.buf, r.n, nil
}

// readFD is the raw read callback: false (wait for the socket to become
// readable) while the read would block.
func (p *peekedConn) readFD(fd uintptr) bool {
	s := &p.rs
	s.buf = s.pool.Get(s.size)
	n, wouldBlock, err := readSocket(fd, *s.buf)
	if wouldBlock {
		s.pool.Put(s.buf)
		s.buf = nil
		return false
	}
	s.n, s.err = max(n, 0), err
	if err != nil {
		s.pool.Put(s.buf)
		s.buf = nil
	}
	return true
}

// ConnectionState is the TLS state of a TLS connection, for the REST
// handler (http.Server fills Request.TLS from it) and gRPC's AuthInfo.
func (p *peekedConn) ConnectionState() tls.ConnectionState {
	if tc, ok := p.Conn.(*tls.Conn); ok {
		return tc.ConnectionState()
	}
	return tls.ConnectionState{}
}

// chanListener is a net.Listener fed by portMux.
type chanListener struct {
	addr   net.Addr
	ch     chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) deliver(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// handshakenCreds are gRPC transport credentials for connections whose
// TLS handshake portMux already did: they only report the TLS state, so
// node authorization sees the client certificate as before.
type handshakenCreds struct{}

var _ credentials.TransportCredentials = handshakenCreds{}

func (handshakenCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	pc, ok := c.(*peekedConn)
	if !ok {
		return nil, nil, errors.New("xds: connection did not come through the port multiplexer")
	}
	if _, isTLS := pc.Conn.(*tls.Conn); !isTLS {
		return nil, nil, errors.New("xds: plaintext connection on a TLS port")
	}
	return c, credentials.TLSInfo{State: pc.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (handshakenCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("xds: server-side credentials only")
}

func (handshakenCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (handshakenCreds) Clone() credentials.TransportCredentials { return handshakenCreds{} }

func (handshakenCreds) OverrideServerName(string) error { return nil }
