// Package h2wire reads what gRPC clients wrote on the wire, for tests
// that assert on the bytes rather than on what a server made of them:
// a listener keeps each accepted connection's client bytes, and
// golang.org/x/net/http2's framer (not gRPC's) reads them back.
package h2wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Listener keeps what clients write to its connections, a buffer each.
type Listener struct {
	net.Listener
	mu    sync.Mutex
	conns []*bytes.Buffer
}

// Accept accepts a connection whose reads are kept.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	b := &bytes.Buffer{}
	l.mu.Lock()
	l.conns = append(l.conns, b)
	l.mu.Unlock()
	return &teeConn{Conn: c, l: l, b: b}, nil
}

type teeConn struct {
	net.Conn
	l *Listener
	b *bytes.Buffer
}

func (c *teeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.mu.Lock()
	c.b.Write(p[:n])
	c.l.mu.Unlock()
	return n, err
}

// EachFrame calls fn with every whole frame clients wrote so far, one
// connection after another (headers decoded: *http2.MetaHeadersFrame).
func (l *Listener) EachFrame(fn func(conn int, f http2.Frame)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, conn := range l.conns {
		raw := bytes.TrimPrefix(conn.Bytes(), []byte(http2.ClientPreface))
		fr := http2.NewFramer(io.Discard, bytes.NewReader(raw))
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		for {
			f, err := fr.ReadFrame()
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				break // a frame still arriving
			}
			if err != nil {
				return fmt.Errorf("connection %d: %w", i, err)
			}
			fn(i, f)
		}
	}
	return nil
}

// Messages returns the gRPC messages clients sent on the streams of
// method path (e.g. "/pkg.Service/Method"), in order, a slice a stream.
func (l *Listener) Messages(path string) ([][][]byte, error) {
	type key struct {
		conn int
		id   uint32
	}
	var order []key
	data := map[key]*bytes.Buffer{}
	err := l.EachFrame(func(conn int, f http2.Frame) {
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.PseudoValue("path") == path {
				k := key{conn, f.StreamID}
				order = append(order, k)
				data[k] = &bytes.Buffer{}
			}
		case *http2.DataFrame:
			if b := data[key{conn, f.StreamID}]; b != nil {
				b.Write(f.Data())
			}
		}
	})
	if err != nil {
		return nil, err
	}
	out := make([][][]byte, 0, len(order))
	for _, k := range order {
		var msgs [][]byte
		b := data[k].Bytes()
		// gRPC's message framing: a flag byte, a 4-byte length, the
		// message.
		for len(b) >= 5 && uint64(len(b)) >= 5+uint64(binary.BigEndian.Uint32(b[1:5])) {
			n := int(binary.BigEndian.Uint32(b[1:5]))
			msgs = append(msgs, b[5:5+n])
			b = b[5+n:]
		}
		out = append(out, msgs)
	}
	return out, nil
}
