package bench

import (
	"io"
	"net"
	"syscall"
	"time"
	"unsafe"
)

// stampedConn reads a TCP connection with the kernel's receive timestamp
// of each read (SO_TIMESTAMPNS), so a simulated proxy knows when a
// response reached its socket, apart from when the load generator's one
// core got round to reading it (Probe.Arrivals). The timestamp is the
// newest of the segments the read took from, never earlier than the
// bytes it returned; it can be later, as the kernel merges segments
// that arrive while one waits to be read and stamps them with the newer
// time: an upper bound on when the bytes arrived.
type stampedConn struct {
	*net.TCPConn
	raw syscall.RawConn
	// last is the receive time (Unix ns) of the latest read (see above);
	// 0 if it carried none. The reading goroutine's.
	last int64

	// the read in progress, kept here so a read allocates nothing
	buf    []byte
	oob    [64]byte
	n      int
	err    error
	doRead func(fd uintptr) bool
}

// stampConn turns receive timestamps on for c; nil (and c read as it is)
// when c is not a TCP connection or the kernel refuses.
func stampConn(c net.Conn) *stampedConn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return nil
	}
	s := &stampedConn{TCPConn: tc, raw: raw}
	s.doRead = s.readFD
	return s
}

func (s *stampedConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	s.buf, s.n, s.err = b, 0, nil
	if err := s.raw.Read(s.doRead); err != nil {
		s.buf = nil
		return 0, err
	}
	s.buf = nil
	if s.err != nil {
		return s.n, s.err
	}
	if s.n == 0 {
		return 0, io.EOF
	}
	return s.n, nil
}

// readFD is one recvmsg; false while the socket has nothing (RawConn
// waits for it to be readable).
func (s *stampedConn) readFD(fd uintptr) bool {
	n, oobn, _, _, err := syscall.Recvmsg(int(fd), s.buf, s.oob[:], 0)
	for err == syscall.EINTR {
		n, oobn, _, _, err = syscall.Recvmsg(int(fd), s.buf, s.oob[:], 0)
	}
	if err == syscall.EAGAIN {
		return false
	}
	if err != nil {
		s.err = err
		return true
	}
	s.n = n
	// A read without one (the kernel turns stamping on for all sockets
	// a moment after the first asks) makes the arrival unknown, not the
	// previous read's.
	s.last, _ = rxStamp(s.oob[:oobn])
	return true
}

// rxStamp finds SCM_TIMESTAMPNS among the control messages of a read.
// By hand rather than with syscall.ParseSocketControlMessage, which
// allocates a slice per call: this runs for every read of every
// simulated proxy.
func rxStamp(oob []byte) (int64, bool) {
	for len(oob) >= syscall.SizeofCmsghdr {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < syscall.SizeofCmsghdr || l > len(oob) {
			return 0, false
		}
		if h.Level == syscall.SOL_SOCKET && h.Type == syscall.SCM_TIMESTAMPNS && l >= syscall.CmsgLen(int(unsafe.Sizeof(syscall.Timespec{}))) {
			ts := (*syscall.Timespec)(unsafe.Pointer(&oob[syscall.SizeofCmsghdr]))
			return ts.Nano(), true
		}
		oob = oob[min(syscall.CmsgSpace(l-syscall.SizeofCmsghdr), len(oob)):]
	}
	return 0, false
}

// arrival is when the newest bytes read so far reached the socket (zero
// when unknown).
func (s *stampedConn) arrival() time.Time {
	if s == nil {
		return time.Time{}
	}
	if ns := s.last; ns > 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}
