// Package unixsock opens Unix domain socket listeners with the file mode
// and group an operator chose, so a proxy running as another user (Envoy
// as user envoy) can connect and nobody else can.
package unixsock

import (
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
)

// DefaultMode lets the owner and the socket's group connect.
const DefaultMode os.FileMode = 0o660

// Listen listens on path. A stale socket file from a previous run is
// removed (a restart must not fail with "address in use"); any other file
// there is an error, never deleted. The socket gets mode (0 means
// DefaultMode) and, if group is set (a name or a numeric gid), that group.
//
// The kernel checks a connecting peer against the socket file's mode at
// connect, and bind creates the file with the process's umask: a socket
// chmod'ed after bind could take connections from anyone the umask let in
// (queued, then accepted) in between. So it is bound in a directory of
// its own, mode 0700 beside path, given its mode and group there, and
// renamed into place: at path it never had another mode.
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
	private, err := os.MkdirTemp(filepath.Dir(path), ".sock")
	if err != nil {
		return nil, fmt.Errorf("creating a private directory beside %s to bind the socket in: %w", path, err)
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, "s")
	if len(tmp) > maxPathLen {
		return nil, fmt.Errorf("socket path %s: binding it safely takes %d bytes (a private directory beside it); Unix sockets allow %d; choose a shorter path", path, len(tmp), maxPathLen)
	}
	lis, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, err
	}
	ul := lis.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // the file moves; Close removes it at path
	fail := func(err error) (net.Listener, error) {
		_ = ul.Close()
		return nil, err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(fmt.Errorf("setting mode %04o on %s: %w", mode, path, err))
	}
	if gid >= 0 {
		if err := os.Chown(tmp, -1, gid); err != nil {
			return fail(fmt.Errorf("setting group %s on %s: %w (the process must own the socket and belong to the group, or run as root)", group, path, err))
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(fmt.Errorf("moving the socket into place at %s: %w", path, err))
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	return &listener{UnixListener: ul, addr: &net.UnixAddr{Name: path, Net: "unix"}, file: fi}, nil
}

// maxPathLen is the longest socket path bind takes on Linux (sun_path is
// 108 bytes with its NUL).
const maxPathLen = 107

// listener is the socket at its final path: Addr names it, and Close
// removes it there, as net's own listener removes the file it bound,
// unless another process has put a socket of its own there since.
type listener struct {
	*net.UnixListener
	addr *net.UnixAddr
	file os.FileInfo
	once sync.Once
}

func (l *listener) Addr() net.Addr { return l.addr }

func (l *listener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		if cur, statErr := os.Lstat(l.addr.Name); statErr == nil && os.SameFile(cur, l.file) {
			_ = os.Remove(l.addr.Name)
		}
	})
	return err
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
