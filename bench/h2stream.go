package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// h2Stream is one ADS stream on a connection of its own, spoken over
// HTTP/2 by the simulated proxy itself (FleetConfig.H2): the goroutine
// that reads a response also decodes it and writes the ACK, as Envoy's
// event loop does. grpc-go's client hands each response from its reader
// goroutine to the caller's and each request through a writer goroutine
// to its own loopy writer: three hand-offs and four goroutines per proxy,
// which made the load generator's one core spend ~42 µs per proxy per
// change, more than the server under test (bench/README.md).
//
// It is the protocol, not a shortcut through it: the server sees the
// preface, SETTINGS, HPACK headers, DATA in frames of at most the
// server's SETTINGS_MAX_FRAME_SIZE, and sends that never exceed its
// connection and stream windows; the stream ACKs the server's SETTINGS
// and PINGs and ends on its trailers, RST_STREAM or a read error.
type h2Stream struct {
	conn  net.Conn
	r     *http2.Framer // the reading goroutine's only
	stamp *stampedConn  // conn read with receive timestamps (nil: without)
	// arrived is when the last message RecvMsg returned had reached the
	// socket, by the kernel's clock, at the latest (zero: unknown).
	arrived time.Time
	onSize  func(int) // the size of each message received
	closed  atomic.Bool

	// receive side, the reading goroutine's only
	msg       []byte // DATA received and not yet a whole message
	unacked   int64  // DATA bytes received since the last WINDOW_UPDATE
	gotHeader bool   // the response headers came
	goAway    string // the server's GOAWAY, for the error of the close

	wmu sync.Mutex // the write side
	bw  *bufio.Writer
	w   *http2.Framer
	// out is gRPC-framed request bytes the server's windows did not yet
	// admit; connWin and streamWin are those windows, maxFrame its
	// SETTINGS_MAX_FRAME_SIZE.
	out                []byte
	connWin, streamWin int64
	initWin            int64
	maxFrame           int
	werr               error
}

// h2Window is what the stream advertises for itself and its connection,
// 256 MiB (an older Envoy's default), as newConn does for grpc-go (a
// variable for the test of its replenishing).
var h2Window int64 = 256 << 20

const (
	// h2StreamID is the stream's HTTP/2 id: the connection's first.
	h2StreamID = 1
	// h2DefaultWindow and h2DefaultFrame are HTTP/2's initial values
	// (RFC 9113 §6.5.2), in force until the server's SETTINGS say more.
	h2DefaultWindow = 65535
	h2DefaultFrame  = 16384
	// h2KeepBuffer is the most a stream keeps of a message buffer once
	// it is empty: an initial sync's 40 KiB kept by 20,000 clients was
	// most of the load generator's heap, and its collector's work.
	h2KeepBuffer = 4 << 10
)

// dialH2 opens an ADS stream (path: the gRPC method) to addr. Like
// grpc.WaitForReady for the grpc-go client, and like Envoy, it retries
// with backoff until ctx ends, both a refused TCP connection and one the
// server closes before its SETTINGS arrive: in a reconnect storm of
// 20,000 a server drops the connections it cannot serve in time.
func dialH2(ctx context.Context, addr, path string, onSize func(int)) (*h2Stream, error) {
	s, err := backoff.Retry(ctx, func() (*h2Stream, error) {
		// 20 s an attempt, gRPC's minimum connect timeout: a server that
		// accepts and never answers is tried again.
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return openH2(actx, addr)
	},
		// Envoy's ADS retry bounds (500 ms doubling to 30 s), jittered ±50 %
		// (Envoy draws each pause from zero to the bound).
		backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: 500 * time.Millisecond, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: 30 * time.Second}),
		backoff.WithMaxElapsedTime(0))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	s.onSize = onSize
	var hdr headerBuf
	enc := hpack.NewEncoder(&hdr)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path}, {Name: ":authority", Value: authority(addr)},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
		{Name: "user-agent", Value: "xds-load"},
	} {
		_ = enc.WriteField(f) // writes to memory
	}
	if err := s.write(func(w *http2.Framer) error {
		return w.WriteHeaders(http2.HeadersFrameParam{StreamID: h2StreamID, BlockFragment: hdr, EndHeaders: true})
	}); err != nil {
		return nil, fmt.Errorf("open stream to %s: %w", addr, err)
	}
	return s, nil
}

// authority is the :authority of a stream to addr: grpc-go's for a Unix
// socket ("localhost"), else the address.
func authority(addr string) string {
	if strings.HasPrefix(addr, "unix://") {
		return "localhost"
	}
	return addr
}

// openH2 connects and exchanges prefaces: the client's preface and
// SETTINGS out, the server's SETTINGS in (applied and ACKed), the
// connection's window raised. Until ctx ends.
func openH2(ctx context.Context, addr string) (*h2Stream, error) {
	var d net.Dialer
	network := "tcp"
	if path, ok := strings.CutPrefix(addr, "unix://"); ok { // an agent's socket (agents.go)
		network, addr = "unix", path
	}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	s := &h2Stream{conn: conn, connWin: h2DefaultWindow, streamWin: h2DefaultWindow, initWin: h2DefaultWindow, maxFrame: h2DefaultFrame}
	var rd io.Reader = conn
	if s.stamp = stampConn(conn); s.stamp != nil {
		rd = s.stamp
	}
	s.r = http2.NewFramer(nil, bufio.NewReaderSize(rd, 4<<10))
	s.r.SetReuseFrames()
	s.r.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	s.bw = bufio.NewWriterSize(conn, 4<<10)
	s.w = http2.NewFramer(s.bw, nil)
	if err := s.write(func(w *http2.Framer) error {
		_, _ = s.bw.WriteString(http2.ClientPreface)
		if err := w.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(h2Window)}, http2.Setting{ID: http2.SettingEnablePush, Val: 0}); err != nil {
			return err
		}
		if h2Window > h2DefaultWindow {
			return w.WriteWindowUpdate(0, uint32(h2Window-h2DefaultWindow))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()
	// RFC 9113 §3.4: the server's preface is a SETTINGS frame.
	f, err := s.r.ReadFrame()
	if err == nil {
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			err = s.frame(sf)
		} else {
			err = fmt.Errorf("the server's first frame is %v, not SETTINGS", f.Header().Type)
		}
	}
	if !stop() {
		err = cmp.Or(ctx.Err(), err)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

type headerBuf []byte

func (b *headerBuf) Write(p []byte) (int, error) { *b = append(*b, p...); return len(p), nil }

// SendMsg queues m and writes what the server's windows admit; it never
// blocks on flow control (the rest goes out as WINDOW_UPDATEs arrive, on
// the reading goroutine), so the reading goroutine may send. Write
// errors close the connection: the reader reports the stream's end.
func (s *h2Stream) SendMsg(m any) error {
	return s.send(func(out []byte) ([]byte, error) {
		return proto.MarshalOptions{}.MarshalAppend(out, m.(proto.Message))
	})
}

// SendEncoded is SendMsg of the message encode appends to its argument.
func (s *h2Stream) SendEncoded(encode func([]byte) []byte) error {
	return s.send(func(out []byte) ([]byte, error) { return encode(out), nil })
}

// send frames the message encode appends to out and writes it.
func (s *h2Stream) send(encode func(out []byte) ([]byte, error)) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.werr != nil {
		return s.werr
	}
	n := len(s.out)
	s.out = append(s.out, 0, 0, 0, 0, 0)
	var err error
	if s.out, err = encode(s.out); err != nil {
		s.out = s.out[:n]
		return err
	}
	binary.BigEndian.PutUint32(s.out[n+1:], uint32(len(s.out)-n-5))
	return s.flushLocked()
}

// flushLocked writes as much of out as the windows admit, in frames of
// at most maxFrame, then flushes the connection once.
func (s *h2Stream) flushLocked() error {
	sent := 0
	for sent < len(s.out) {
		n := min(int64(len(s.out)-sent), s.connWin, s.streamWin, int64(s.maxFrame))
		if n <= 0 {
			break
		}
		if err := s.w.WriteData(h2StreamID, false, s.out[sent:sent+int(n)]); err != nil {
			return s.failLocked(err)
		}
		sent += int(n)
		s.connWin -= n
		s.streamWin -= n
	}
	if sent > 0 {
		s.out = s.out[:copy(s.out, s.out[sent:])]
		if len(s.out) == 0 && cap(s.out) > h2KeepBuffer {
			s.out = nil
		}
	}
	if err := s.bw.Flush(); err != nil {
		return s.failLocked(err)
	}
	return nil
}

func (s *h2Stream) failLocked(err error) error {
	if s.werr == nil {
		s.werr = err
		s.conn.Close()
	}
	return s.werr
}

// write runs one control write (SETTINGS ACK, PING ACK, WINDOW_UPDATE).
func (s *h2Stream) write(f func(*http2.Framer) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.werr != nil {
		return s.werr
	}
	if err := f(s.w); err != nil {
		return s.failLocked(err)
	}
	if err := s.bw.Flush(); err != nil {
		return s.failLocked(err)
	}
	return nil
}

// RecvMsg reads frames until one whole response is in and unmarshals it
// into m. Only one goroutine may call it. It returns io.EOF when the
// server ended the stream with OK, the stream's status when it ended
// otherwise, and context.Canceled after Close.
func (s *h2Stream) RecvMsg(m any) error {
	for {
		if len(s.msg) >= 5 {
			if s.msg[0] != 0 {
				return s.fail(status.Error(codes.Internal, "xds-load: a compressed response (no compression was offered)"))
			}
			if n := int(binary.BigEndian.Uint32(s.msg[1:5])); len(s.msg) >= 5+n {
				s.onSize(n)
				// The read that completed the message is the newest: the
				// buffered reader reads only once it is empty.
				s.arrived = s.stamp.arrival()
				err := proto.Unmarshal(s.msg[5:5+n], m.(proto.Message)) // copies what it keeps
				s.msg = s.msg[:copy(s.msg, s.msg[5+n:])]
				if len(s.msg) == 0 && cap(s.msg) > h2KeepBuffer {
					s.msg = nil // the initial sync's size, not a change's
				}
				return err
			}
		}
		f, err := s.r.ReadFrame()
		if err != nil {
			return s.fail(s.readErr(err))
		}
		if err := s.frame(f); err != nil {
			if s.closed.Load() {
				err = context.Canceled // Close raced a write here
			}
			return s.fail(err)
		}
	}
}

// Arrived is when the message RecvMsg last returned reached the socket, by
// the kernel's receive timestamp of the read that completed it: never
// early, and later when bytes that came after it were read with it or
// merged with it in the kernel's queue (stampedConn); zero when unknown.
func (s *h2Stream) Arrived() time.Time { return s.arrived }

// frame acts on one frame; an error ends the stream.
func (s *h2Stream) frame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		if f.StreamID != h2StreamID {
			return status.Errorf(codes.Internal, "xds-load: DATA on stream %d", f.StreamID)
		}
		s.msg = append(s.msg, f.Data()...)
		// Flow control counts the whole payload, padding included.
		if s.unacked += int64(f.Length); s.unacked >= h2Window/2 {
			n := uint32(s.unacked)
			s.unacked = 0
			if err := s.write(func(w *http2.Framer) error {
				if err := w.WriteWindowUpdate(0, n); err != nil {
					return err
				}
				return w.WriteWindowUpdate(h2StreamID, n)
			}); err != nil {
				return status.Error(codes.Unavailable, err.Error())
			}
		}
		if f.StreamEnded() {
			return status.Error(codes.Internal, "xds-load: the server ended the stream without trailers")
		}
	case *http2.MetaHeadersFrame:
		return s.headers(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if err := f.ForeachSetting(s.setting); err != nil {
			return err
		}
		// A larger initial window lets queued bytes go (RFC 9113
		// §6.9.2): grpc-go's BDP estimate raises it this way alone.
		return s.write(func(w *http2.Framer) error {
			if len(s.out) > 0 {
				if err := s.flushLocked(); err != nil {
					return err
				}
			}
			return w.WriteSettingsAck()
		})
	case *http2.PingFrame:
		if !f.IsAck() {
			data := f.Data
			return s.write(func(w *http2.Framer) error { return w.WritePing(true, data) })
		}
	case *http2.WindowUpdateFrame:
		s.wmu.Lock()
		defer s.wmu.Unlock()
		if f.StreamID == 0 {
			s.connWin += int64(f.Increment)
		} else {
			s.streamWin += int64(f.Increment)
		}
		if len(s.out) > 0 && s.werr == nil {
			return s.flushLocked()
		}
	case *http2.RSTStreamFrame:
		code := codes.Unavailable
		if f.ErrCode == http2.ErrCodeCancel {
			code = codes.Canceled
		}
		return status.Errorf(code, "xds-load: the server reset the stream: %v", f.ErrCode)
	case *http2.GoAwayFrame:
		// Streams up to LastStreamID still finish; ours is the first.
		// Its code and debug data explain the close that follows (a
		// protocol error of this client's, ENHANCE_YOUR_CALM).
		s.goAway = fmt.Sprintf(" after GOAWAY %v %q", f.ErrCode, f.DebugData())
		if f.LastStreamID < h2StreamID {
			return status.Errorf(codes.Unavailable, "xds-load: the server went away before the stream: %v", f.ErrCode)
		}
	}
	return nil
}

// setting applies one of the server's SETTINGS.
func (s *h2Stream) setting(st http2.Setting) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	switch st.ID {
	case http2.SettingInitialWindowSize:
		// RFC 9113 §6.9.2: the change applies to open streams' windows.
		s.streamWin += int64(st.Val) - s.initWin
		s.initWin = int64(st.Val)
	case http2.SettingMaxFrameSize:
		s.maxFrame = int(st.Val)
	}
	return nil
}

// headers reads the response headers or the trailers: a status other
// than 200 or a grpc-status other than OK ends the stream with it.
func (s *h2Stream) headers(f *http2.MetaHeadersFrame) error {
	if !s.gotHeader {
		s.gotHeader = true
		if st := f.PseudoValue("status"); st != "200" {
			return status.Errorf(codes.Unavailable, "xds-load: HTTP status %q", st)
		}
	}
	if !f.StreamEnded() {
		return nil
	}
	code, err := strconv.Atoi(headerValue(f, "grpc-status"))
	if err != nil {
		return status.Errorf(codes.Internal, "xds-load: trailers without grpc-status")
	}
	if code == int(codes.OK) {
		if len(s.msg) > 0 {
			return status.Errorf(codes.Internal, "xds-load: the stream ended inside a message (%d bytes of it)", len(s.msg))
		}
		return io.EOF
	}
	raw := headerValue(f, "grpc-message")
	msg, err := url.PathUnescape(raw) // gRPC percent-encodes it
	if err != nil {
		msg = raw // as the gRPC spec says of a malformed one
	}
	return status.Error(codes.Code(code), msg)
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// readErr is a failed read as the stream's end: Close's, or the
// connection's.
func (s *h2Stream) readErr(err error) error {
	if s.closed.Load() {
		return context.Canceled
	}
	s.wmu.Lock()
	werr := s.werr
	s.wmu.Unlock()
	if werr != nil {
		err = werr // a failed write closed the connection
	}
	if errors.Is(err, io.EOF) {
		return status.Errorf(codes.Unavailable, "xds-load: the server closed the connection%s", s.goAway)
	}
	return status.Error(codes.Unavailable, err.Error())
}

// fail ends the stream: the connection closes with its first error.
func (s *h2Stream) fail(err error) error {
	s.wmu.Lock()
	s.failLocked(err)
	s.wmu.Unlock()
	return err
}

// Close ends the stream and its connection; RecvMsg then returns
// context.Canceled.
func (s *h2Stream) Close() {
	s.closed.Store(true)
	s.conn.Close()
}
