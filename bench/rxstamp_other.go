//go:build !linux

package bench

import (
	"net"
	"time"
)

// stampedConn is Linux's (rxstamp_linux.go): elsewhere arrivals are
// unknown and connections are read as they are.
type stampedConn struct{ net.Conn }

func stampConn(net.Conn) *stampedConn { return nil }

func (s *stampedConn) arrival() time.Time { return time.Time{} }
