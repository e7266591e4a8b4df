package consultest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

const installHint = "run `make test` or `scripts/install-consul.sh` to build it into .tools/bin, or set CONSUL_BIN"

// Binary returns the path of the consul binary to run: $CONSUL_BIN, else
// <module root>/.tools/bin/consul, else consul on $PATH. Without one it skips
// the test, except on CI (CI=true), where a missing binary must not silently
// turn the integration tests into skips.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CONSUL_BIN"); p != "" {
		if !isExecutable(p) {
			t.Fatalf("consultest: CONSUL_BIN=%q is not an executable file", p)
		}
		return p
	}
	if root := moduleRoot(); root != "" {
		if p := filepath.Join(root, ".tools", "bin", "consul"); isExecutable(p) {
			return p
		}
	}
	if p, err := exec.LookPath("consul"); err == nil {
		return p
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("consultest: no consul binary found; %s", installHint)
	}
	t.Skipf("consultest: no consul binary found; %s", installHint)
	return ""
}

// moduleRoot walks up from the working directory, which go test sets to the
// package directory, to the directory holding go.mod.
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
