//go:build !linux

package consultest

import "syscall"

func procAttr() *syscall.SysProcAttr { return nil }

// waitStopped cannot check without /proc; SIGSTOP is usually in effect at once.
func waitStopped(pid int) {}
