package packaging

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestVersionOrdersAsReleases runs version.sh on a repository through a
// history of tags and snapshots and checks that dpkg orders each version
// after the one before: what apt needs to take an upgrade as an upgrade.
// The short hash, the old version, could compare either way.
func TestVersionOrdersAsReleases(t *testing.T) {
	need(t, "dpkg", "scripts/install-debtools.sh")
	need(t, "git", "apt-get install git")
	script, err := filepath.Abs("version.sh")
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	git := func(date string, args ...string) {
		t.Helper()
		runEnv(t, []string{"GIT_COMMITTER_DATE=" + date, "GIT_AUTHOR_DATE=" + date,
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid"},
			"git", append([]string{"-C", repo}, args...)...)
	}
	n := 0
	commit := func(date string) {
		n++
		if err := os.WriteFile(filepath.Join(repo, "f"), []byte(strings.Repeat("x", n)), 0o644); err != nil {
			t.Fatal(err)
		}
		git(date, "add", "f")
		git(date, "commit", "-q", "-m", "c")
	}
	version := func() string {
		t.Helper()
		return strings.TrimSpace(run(t, script, repo))
	}
	git("2026-01-01T00:00:00Z", "init", "-q")

	var got []string
	commit("2026-01-01T10:00:00Z")
	got = append(got, version()) // before any tag
	commit("2026-01-02T10:00:00Z")
	git("2026-01-02T10:00:00Z", "tag", "v0.1.0")
	got = append(got, version()) // the release
	commit("2026-01-03T10:00:00Z")
	got = append(got, version()) // a snapshot after it
	commit("2026-01-03T10:00:00Z")
	got = append(got, version()) // same second: the count orders them
	commit("2026-01-04T09:00:00Z")
	got = append(got, version())
	git("2026-01-04T09:00:00Z", "tag", "v0.1.1")
	got = append(got, version()) // the next patch release
	commit("2026-01-05T10:00:00Z")
	git("2026-01-05T10:00:00Z", "tag", "v0.2.0")
	got = append(got, version())
	if err := os.WriteFile(filepath.Join(repo, "f"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	got = append(got, version()) // uncommitted changes on the release

	want := []*regexp.Regexp{
		regexp.MustCompile(`^0\.0\.1~git20260101T100000\.1\.g[0-9a-f]{7}$`),
		regexp.MustCompile(`^0\.1\.0$`),
		regexp.MustCompile(`^0\.1\.1~git20260103T100000\.1\.g[0-9a-f]{7}$`),
		regexp.MustCompile(`^0\.1\.1~git20260103T100000\.2\.g[0-9a-f]{7}$`),
		regexp.MustCompile(`^0\.1\.1~git20260104T090000\.3\.g[0-9a-f]{7}$`),
		regexp.MustCompile(`^0\.1\.1$`),
		regexp.MustCompile(`^0\.2\.0$`),
		regexp.MustCompile(`^0\.2\.0\+dirty$`),
	}
	for i, v := range got {
		if !want[i].MatchString(v) {
			t.Errorf("version %d = %q, want %s", i, v, want[i])
		}
		if i > 0 && !dpkgLess(t, got[i-1], v) {
			t.Errorf("dpkg does not order %q before %q", got[i-1], v)
		}
	}
}
