package serve

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc/mem"
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
