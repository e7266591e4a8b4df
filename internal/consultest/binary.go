package consultest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/modroot"
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
	if root := modroot.Dir(); root != "" {
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

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
