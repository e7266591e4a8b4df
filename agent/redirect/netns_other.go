//go:build !linux

package redirect

import (
	"context"
	"errors"
)

// errNoNetns: network namespaces are Linux's.
var errNoNetns = errors.New("network namespaces (-netns) need Linux")

// InNetns fails everywhere but on Linux.
func InNetns(path string, run Runner) Runner {
	return func(context.Context, ...string) ([]byte, error) { return nil, errNoNetns }
}

// Do fails everywhere but on Linux.
func Do(path string, f func() error) error { return errNoNetns }
