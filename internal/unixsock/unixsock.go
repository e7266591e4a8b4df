// Package unixsock opens Unix domain socket listeners with the file mode
// and group an operator chose, so a proxy running as another user (Envoy
// as user envoy) can connect and nobody else can.
package unixsock

import (
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"
)

// DefaultMode lets the owner and the socket's group connect.
const DefaultMode os.FileMode = 0o660

// Listen listens on path. A stale socket file from a previous run is
// removed (a restart must not fail with "address in use"); any other file
// there is an error, never deleted. The socket gets mode (0 means
// DefaultMode) and, if group is set (a name or a numeric gid), that group.
// Mode and group are applied before the first Accept, so there is no
// window in which another user could connect.
func Listen(path string, mode os.FileMode, group string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket; remove it or choose another path", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
		}
	}
	gid := -1
	if group != "" {
		g, err := lookupGroup(group)
		if err != nil {
			return nil, err
		}
		gid = g
	}
	if mode == 0 {
		mode = DefaultMode
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, mode); err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("setting mode %04o on %s: %w", mode, path, err)
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			_ = lis.Close()
			return nil, fmt.Errorf("setting group %s on %s: %w (the process must own the socket and belong to the group, or run as root)", group, path, err)
		}
	}
	return lis, nil
}

func lookupGroup(group string) (int, error) {
	if gid, err := strconv.Atoi(group); err == nil {
		return gid, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, fmt.Errorf("socket group %q: %w", group, err)
	}
	return strconv.Atoi(g.Gid)
}

// ParseMode parses an octal file mode such as "0660".
func ParseMode(s string) (os.FileMode, error) {
	if s == "" {
		return DefaultMode, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return 0, fmt.Errorf("socket mode %q: want octal permission bits such as \"0660\"", s)
	}
	return os.FileMode(m), nil
}
