//go:build !linux

package agent

import (
	"errors"
	"net"
)

// Elsewhere the agent cannot check a socket peer, so no local stream is
// served a Connect leaf (leafaccess.go): it is never served unchecked.
func peerCredentials(*net.UnixConn) (PeerCred, error) {
	return PeerCred{}, errors.New("socket peer credentials are only read on Linux")
}
