package redirect

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs run inside the network namespace at path (such as
// /var/run/netns/NAME), as Consul's -netns flag does: the calling thread
// enters the namespace for the duration of the command, so iptables
// (forked from that thread) sees the namespace's tables.
func InNetns(path string, run Runner) Runner {
	return func(ctx context.Context, args ...string) (out []byte, err error) {
		err = Do(path, func() error {
			out, err = run(ctx, args...)
			return err
		})
		return out, err
	}
}

// Do calls f on an OS thread that is in the network namespace at path;
// sockets f opens and processes it starts belong to that namespace.
func Do(path string, f func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current network namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering network namespace %s (needs root): %w", path, err)
	}
	ferr := f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so it ends with this goroutine
		// rather than serving others from the wrong namespace.
		return fmt.Errorf("leaving network namespace %s: %w", path, err)
	}
	runtime.UnlockOSThread()
	return ferr
}
