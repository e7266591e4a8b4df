package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// need returns the path of a tool the packaging tests use. Missing, the
// test skips with the script that installs it, or fails under CI=true,
// where `make test` has run that script and a skip would hide a broken
// package.
func need(t *testing.T, tool, script string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err == nil {
		return p
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("%s not found: `make test` installs it with %s", tool, script)
	}
	t.Skipf("%s not found: run %s (make deb-tools / make nfpm)", tool, script)
	return ""
}

// nfpm is the pinned packager: $NFPM (set by `make test`), else the one
// scripts/install-nfpm.sh built into .tools/bin, else nfpm on PATH.
func nfpm(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("NFPM"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if m, _ := filepath.Glob("../.tools/bin/nfpm-v*"); len(m) > 0 {
		p, _ := filepath.Abs(m[len(m)-1])
		return p
	}
	return need(t, "nfpm", "scripts/install-nfpm.sh")
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	return runEnv(t, nil, name, args...)
}

func runEnv(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// dpkgLess reports whether dpkg orders version a before b.
func dpkgLess(t *testing.T, a, b string) bool {
	t.Helper()
	err := exec.Command("dpkg", "--compare-versions", a, "lt", b).Run()
	if err == nil {
		return true
	}
	if _, ok := err.(*exec.ExitError); ok {
		return false
	}
	t.Fatalf("dpkg --compare-versions: %v", err)
	return false
}
