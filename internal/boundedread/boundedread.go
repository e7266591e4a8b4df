// Package boundedread reads a file a user or a setting names without
// trusting it: a regular file only, up to a size, within a deadline. The
// policy's files, the agent's and the daemon's settings files and the
// CLI's inputs all go through it (docs/input-limits.md).
package boundedread

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// Timeout bounds one file read: a local file reads in microseconds, a
// hung network file system never.
const Timeout = 2 * time.Second

// ErrNotRegularFile is returned for a path that is a device, a FIFO, a
// socket or a directory: reading /dev/zero never ends, and opening a FIFO
// waits for a writer that may never come.
var ErrNotRegularFile = errors.New("not a regular file")

// ErrFileTooLarge is returned for a file over the size limit.
var ErrFileTooLarge = errors.New("file too large")

// ErrReadTimeout is returned when a read outlives its deadline.
var ErrReadTimeout = errors.New("read timed out")

// Read reads the file at path if it is a regular file (after following
// symbolic links) of at most max bytes, before ctx's deadline or Timeout,
// whichever is sooner. It never blocks on a FIFO or a
// device: the path is checked with stat, then opened non-blocking and
// checked again on the open descriptor (a swap between the two is seen),
// and at most max+1 bytes are read whatever the size claims (a file that
// grows while read is refused, not truncated).
//
// A read that outlives the deadline is abandoned: its goroutine finishes
// (and closes the file) when the kernel returns, but the caller goes on
// with ErrReadTimeout. Errors name the path and the reason, never the
// contents.
func Read(ctx context.Context, path string, max int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		b, err := readBounded(path, max)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.data, r.err
	case <-ctx.Done():
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w after %s", ErrReadTimeout, Timeout)}
	}
}

// stallRead, if set, runs before a read: tests make a read hang with it,
// as one on a hung network file system does.
var stallRead atomic.Pointer[func()]

func readBounded(path string, max int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := checkRegular(path, fi, max); err != nil {
		return nil, err
	}
	// O_NONBLOCK: should path have become a FIFO since the stat, the open
	// returns at once instead of waiting for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := checkRegular(path, fi, max); err != nil {
		return nil, err
	}
	if stall := stallRead.Load(); stall != nil {
		(*stall)()
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: it grew past %d bytes while read", ErrFileTooLarge, max)}
	}
	return b, nil
}

func checkRegular(path string, fi fs.FileInfo, max int64) error {
	if !fi.Mode().IsRegular() {
		return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%s); name a regular file", ErrNotRegularFile, fileType(fi.Mode()))}
	}
	if fi.Size() > max {
		return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %d bytes, over the limit of %d", ErrFileTooLarge, fi.Size(), max)}
	}
	return nil
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "mode " + m.String()
}
