//go:build linux

package agent

import (
	"net"
	"syscall"
)

func peerCredentials(c *net.UnixConn) (PeerCred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return PeerCred{}, err
	}
	var cred *syscall.Ucred
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cred, gerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return PeerCred{}, err
	}
	if gerr != nil {
		return PeerCred{}, gerr
	}
	return PeerCred{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}, nil
}
