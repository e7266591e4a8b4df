// Package testhome keeps a package's tests off the user's own
// configuration directory: the bridge's default admin token file lives
// under os.UserConfigDir ($XDG_CONFIG_HOME, else ~/.config), so tests that
// start a bridge without admin.token_file read, generate and share the
// developer's real token there (and the binaries they start do too).
package testhome

import (
	"fmt"
	"os"
	"testing"
)

// Main runs m with XDG_CONFIG_HOME set to a fresh directory, removed
// afterwards; call it from the package's TestMain.
func Main(m *testing.M) {
	dir, err := os.MkdirTemp("", "testhome-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testhome:", err)
		os.Exit(1)
	}
	if err := os.Setenv("XDG_CONFIG_HOME", dir); err != nil {
		fmt.Fprintln(os.Stderr, "testhome:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
