//go:build linux

package bench

import (
	"encoding/binary"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// stampedPair is a loopback TCP connection whose client side reads with
// receive timestamps, once the kernel stamps (it turns stamping on a
// moment after the first socket asks, and keeps it on while one is
// open: until then reads carry none and the arrival is unknown).
func stampedPair(t *testing.T) (server net.Conn, client *stampedConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	s := stampConn(cc)
	if s == nil {
		t.Fatal("no receive timestamps on a loopback TCP connection")
	}
	if !s.arrival().IsZero() {
		t.Fatal("an arrival before any read")
	}
	buf := make([]byte, 16)
	for k := 0; ; k++ {
		if _, err := sc.Write([]byte("w")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Read(buf); err != nil {
			t.Fatal(err)
		}
		if !s.arrival().IsZero() {
			return sc, s
		}
		if k == 100 {
			t.Fatal("no receive timestamp after 100 reads")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStampedConnReadsWhenBytesArrived: bytes read 150 ms after they
// were written carry the time they reached the socket, not the read's;
// a later write, read in turn, carries its own. A read the kernel did not
// stamp (seen now and then in a fresh process under load) leaves the
// arrival unknown, which is allowed: the exchange goes on until two reads
// were stamped, and fails if that takes more than six, or if a stamped
// one reports anything but its own write's time.
func TestStampedConnReadsWhenBytesArrived(t *testing.T) {
	sc, s := stampedPair(t)
	buf := make([]byte, 16)
	stamped := 0
	for round := 0; stamped < 2; round++ {
		if round == 6 {
			t.Fatalf("%d of 6 reads stamped, want 2", stamped)
		}
		sent := time.Now()
		if _, err := sc.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
		readAt := time.Now()
		n, err := s.Read(buf)
		if err != nil || string(buf[:n]) != "hello" {
			t.Fatalf("round %d: read %q, %v", round, buf[:n], err)
		}
		got := s.arrival()
		if got.IsZero() {
			t.Logf("round %d: the kernel did not stamp the read; again", round)
			continue
		}
		stamped++
		if got.Before(sent.Add(-time.Millisecond)) || got.After(sent.Add(100*time.Millisecond)) {
			t.Errorf("round %d: arrival %v after the write, %v before the read; want within 100 ms of the write",
				round, got.Sub(sent), readAt.Sub(got))
		}
	}
	sc.Close()
	if n, err := s.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("after the peer closed: %d bytes, %v; want io.EOF", n, err)
	}
}

// TestRxStamp finds the timestamp among other control messages and
// refuses truncated ones.
func TestRxStamp(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the control messages below are laid out for 64-bit Linux")
	}
	cmsg := func(level, typ int32, data []byte) []byte {
		b := make([]byte, syscall.CmsgSpace(len(data)))
		binary.NativeEndian.PutUint64(b, uint64(syscall.SizeofCmsghdr+len(data)))
		binary.NativeEndian.PutUint32(b[8:], uint32(level))
		binary.NativeEndian.PutUint32(b[12:], uint32(typ))
		copy(b[syscall.SizeofCmsghdr:], data)
		return b
	}
	ts := make([]byte, 16)
	binary.NativeEndian.PutUint64(ts, 1700000000)
	binary.NativeEndian.PutUint64(ts[8:], 123456789)
	other := cmsg(syscall.SOL_SOCKET, 99, []byte{1, 2, 3})
	stamp := cmsg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, ts)
	if got, ok := rxStamp(append(other, stamp...)); !ok || got != 1700000000_123456789 {
		t.Errorf("after another message: %d, %v; want 1700000000123456789", got, ok)
	}
	if _, ok := rxStamp(other); ok {
		t.Error("a timestamp where there is none")
	}
	if _, ok := rxStamp(stamp[:20]); ok {
		t.Error("a timestamp from a truncated message")
	}
	short := cmsg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, ts[:4])
	if _, ok := rxStamp(short); ok {
		t.Error("a timestamp from a message too short to hold one")
	}
}

// TestH2StreamArrivalIsTheSockets: a response read 150 ms after the
// server sent it reports when it reached the socket. A read the kernel
// did not stamp (seen once in a while in a fresh process under load)
// leaves the arrival unknown, which is allowed; the exchange is then
// tried again, and the test fails if no attempt knows its arrival or one
// that does reports the read's time.
func TestH2StreamArrivalIsTheSockets(t *testing.T) {
	stampedPair(t) // the kernel stamps from now on, while it is open
	sentAt := make(chan time.Time, 1)
	addr := startADS(t, adsHandler{serve: func(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
		if _, err := s.Recv(); err != nil {
			return err
		}
		sentAt <- time.Now()
		if err := s.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: "t", Nonce: "n1"}); err != nil {
			return err
		}
		_, err := s.Recv()
		return err
	}})
	for attempt := 1; ; attempt++ {
		s, _ := dialTestH2(t, addr)
		if err := s.SendMsg(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: "t"}); err != nil {
			t.Fatal(err)
		}
		sent := <-sentAt
		time.Sleep(150 * time.Millisecond)
		var resp discoveryv3.DeltaDiscoveryResponse
		if err := s.RecvMsg(&resp); err != nil || resp.GetNonce() != "n1" {
			t.Fatalf("response %v, %v", &resp, err)
		}
		got := s.Arrived()
		if got.IsZero() {
			if attempt == 3 {
				t.Fatal("no attempt knew when its response reached the socket")
			}
			t.Logf("attempt %d: the kernel did not stamp the read; again", attempt)
			continue
		}
		if got.Before(sent) || got.After(sent.Add(100*time.Millisecond)) {
			t.Errorf("arrival %v after the send, want within 100 ms of it (read 150 ms after)", got.Sub(sent))
		}
		return
	}
}

// TestProbeArrivals: an arrival counts once per client, with the first
// ACK, only for the clients the probe waits for; a client whose arrival
// is unknown has none.
func TestProbeArrivals(t *testing.T) {
	p := NewProbe("10.0.0.1", 80, 0, 4).ExpectOnly(4, func(k int) bool { return k != 3 })
	p.Start = time.Unix(100, 0)
	at := func(ms int) time.Time { return p.Start.Add(time.Duration(ms) * time.Millisecond) }
	p.hit(0, at(30), at(10))
	p.hit(0, at(60), at(50)) // a later response: the first counts
	p.hit(1, at(40), time.Time{})
	p.hit(1, at(70), at(65)) // known only for a later response: not this ACK's
	p.hit(2, at(45), at(20))
	p.hit(3, at(5), at(1)) // not waited for: stray
	got := p.Arrivals()
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("arrivals %v, want %v", got, want)
	}
	if lats := p.Latencies(); len(lats) != 3 || lats[0] != 30*time.Millisecond {
		t.Errorf("latencies %v, want 30, 40 and 45 ms", lats)
	}
	select {
	case <-p.Done():
	default:
		t.Error("the probe is not done after every client it waits for ACKed")
	}
}

// TestProcessPassesTheArrival: a simulated proxy that ACKs the probed
// change records, with its ACK, when the response reached its socket,
// and none when its stream knows no arrival.
func TestProcessPassesTheArrival(t *testing.T) {
	for _, known := range []bool{true, false} {
		f := &Fleet{}
		p := NewProbe("10.0.0.1", 80, 0, 1)
		p.Start = time.Now()
		f.probe.Store(p)
		s := &h2Stream{werr: io.ErrClosedPipe} // the ACK's write fails: nothing to send it to
		if known {
			s.arrived = p.Start.Add(7 * time.Millisecond)
		}
		c := &Client{f: f, mode: SotW, h2: s}
		c.process(EDS, []decoded{{name: "svc", matched: true}}, nil, time.Now())
		got := p.Arrivals()
		switch {
		case len(p.Latencies()) != 1:
			t.Fatalf("known %v: %d ACKs recorded, want 1", known, len(p.Latencies()))
		case known && (len(got) != 1 || got[0] != 7*time.Millisecond):
			t.Errorf("arrivals %v, want the stream's 7 ms", got)
		case !known && len(got) != 0:
			t.Errorf("arrivals %v for a stream that knows none", got)
		}
	}
}
