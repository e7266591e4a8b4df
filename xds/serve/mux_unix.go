//go:build unix

package serve

import "syscall"

// rawReads: plaintext connections are read straight from the socket when
// it is readable (peekedConn.ReadOnReady), the way gRPC reads a bare
// *net.TCPConn, so an idle connection holds no read buffer.
const rawReads = true

// readSocket reads what the socket has; wouldBlock when it has nothing.
func readSocket(fd uintptr, b []byte) (n int, wouldBlock bool, err error) {
	n, err = syscall.Read(int(fd), b)
	if err == syscall.EAGAIN || err == syscall.EWOULDBLOCK {
		return 0, true, nil
	}
	return n, false, err
}
