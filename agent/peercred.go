package agent

import (
	"fmt"
	"net"
)

// PeerCred is who is at the other end of a local Unix socket connection,
// as the kernel says at connect time (SO_PEERCRED): it cannot be forged
// by the client, unlike anything it sends. gid is the primary group only.
type PeerCred struct {
	PID      int32
	UID, GID uint32
}

// peerAddr is a Unix socket connection's remote address with its peer's
// credentials: gRPC hands a stream the connection's RemoteAddr as its
// peer.Addr, so the credentials reach the stream's context (and
// /v1/proxies shows them as the proxy's remote address).
type peerAddr struct {
	net.Addr
	cred PeerCred
}

func (p peerAddr) String() string {
	return fmt.Sprintf("unix:pid=%d,uid=%d,gid=%d", p.cred.PID, p.cred.UID, p.cred.GID)
}

// credListener reads each accepted Unix connection's peer credentials.
type credListener struct{ net.Listener }

// credConn is a Unix connection reporting its peer's credentials as its
// RemoteAddr. It embeds *net.UnixConn so the xDS server still finds its
// SyscallConn (it reads ready sockets directly, xds/serve/mux.go).
type credConn struct {
	*net.UnixConn
	addr peerAddr
}

func (c *credConn) RemoteAddr() net.Addr { return c.addr }

// Accept returns a connection whose peer's credentials could not be read
// as it is: its streams are served like TCP's, never a Connect leaf.
func (l credListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return c, nil
	}
	cred, err := peerCredentials(uc)
	if err != nil {
		return c, nil
	}
	return &credConn{UnixConn: uc, addr: peerAddr{Addr: uc.RemoteAddr(), cred: cred}}, nil
}

// peerOf returns the credentials a stream's peer address carries, if it
// came through the agent's Unix socket.
func peerOf(addr net.Addr) (PeerCred, bool) {
	p, ok := addr.(peerAddr)
	return p.cred, ok
}
