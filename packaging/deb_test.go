package packaging

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestDebianPackage builds the .deb as `make package` does (the PIE,
// stripped binary of `make package-bin`, nfpm), then checks it as Debian
// would: lintian reports no error, two builds' versions sort as their
// commits, and installed into a throwaway root (dpkg --root with
// $DPKG_ROOT-aware maintainer scripts) it has its files, its system user
// and its enabled units; purged, nothing of it is left.
func TestDebianPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and a package (about 2 minutes)")
	}
	if runtime.GOOS != "linux" {
		t.Skip("Debian packages are built on Linux")
	}
	need(t, "dpkg-deb", "scripts/install-debtools.sh")
	need(t, "make", "apt-get install make")
	nf := nfpm(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "consul-xds-bridge")
	run(t, "make", "-s", "-C", "..", "package-bin", "PKGBIN="+bin, "PKGVERSION=0.4.1")
	build := func(version string) string {
		t.Helper()
		return strings.TrimSpace(runEnv(t, []string{"NFPM=" + nf}, "./build-deb.sh", bin, version, filepath.Join(dir, "out")))
	}

	t.Run("versions sort", func(t *testing.T) {
		// Two builds: a snapshot after 0.4.0 and the 0.4.1 release; an
		// upgrade from one to the other must be one to apt.
		older := build("0.4.1~git20261201T120000.7.gf00d123")
		newer := build("0.4.1")
		vo := strings.TrimSpace(run(t, "dpkg-deb", "-f", older, "Version"))
		vn := strings.TrimSpace(run(t, "dpkg-deb", "-f", newer, "Version"))
		if vo != "0.4.1~git20261201T120000.7.gf00d123" || vn != "0.4.1" {
			t.Fatalf("Version fields %q, %q", vo, vn)
		}
		if !dpkgLess(t, vo, vn) {
			t.Errorf("dpkg orders %q after %q", vo, vn)
		}
	})

	deb := build("0.4.1")
	if want := "consul-xds-bridge_0.4.1_" + strings.TrimSpace(run(t, "dpkg", "--print-architecture")) + ".deb"; filepath.Base(deb) != want {
		t.Errorf("package file %s, want %s", deb, want)
	}

	t.Run("lintian", func(t *testing.T) {
		lintian := need(t, "lintian", "scripts/install-debtools.sh")
		out := runEnv(t, nil, lintian, "--fail-on", "error", "--display-info", deb)
		t.Logf("lintian:\n%s", out)
		if regexp.MustCompile(`(?m)^E: `).MatchString(out) {
			t.Errorf("lintian reports errors:\n%s", out)
		}
	})

	fields := run(t, "dpkg-deb", "-f", deb, "Package", "Version", "Depends")
	for _, want := range []string{"Package: consul-xds-bridge", "Version: 0.4.1", "libc6", "systemd"} {
		if !strings.Contains(fields, want) {
			t.Errorf("control lacks %q:\n%s", want, fields)
		}
	}

	t.Run("install into a throwaway root", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("dpkg --root installs as root")
		}
		need(t, "systemd-sysusers", "scripts/install-debtools.sh")
		need(t, "deb-systemd-helper", "scripts/install-debtools.sh")
		root := filepath.Join(dir, "root")
		for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "etc"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range []string{"var/lib/dpkg/status", "var/lib/dpkg/available"} {
			if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		dpkg := func(args ...string) string {
			return run(t, "dpkg", append([]string{"--root=" + root, "--force-script-chrootless", "--force-depends"}, args...)...)
		}
		dpkg("-i", deb)
		checkInstalled(t, root)
		// An upgrade (a reinstall) keeps the admin token it wrote.
		token := readFile(t, root, "etc/consul-xds-bridge/admin-token")
		dpkg("-i", deb)
		if got := readFile(t, root, "etc/consul-xds-bridge/admin-token"); got != token {
			t.Errorf("reinstall replaced the admin token")
		}
		dpkg("--purge", "consul-xds-bridge")
		for _, p := range []string{"usr/bin/consul-xds-bridge", "etc/consul-xds-bridge", "lib/systemd/system/consul-xds-bridge.service",
			"etc/systemd/system/multi-user.target.wants/consul-xds-bridge.service", "usr/share/doc/consul-xds-bridge"} {
			if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
				t.Errorf("%s left after purge", p)
			}
		}
	})
}

// checkInstalled checks a root the package was installed into.
func checkInstalled(t *testing.T, root string) {
	t.Helper()
	// The system user and group, from sysusers.d, with no login.
	passwd := readFile(t, root, "etc/passwd")
	user := regexp.MustCompile(`(?m)^consul-xds-bridge:x:(\d+):(\d+):[^:]*:/var/lib/consul-xds-bridge:/usr/sbin/nologin$`).FindStringSubmatch(passwd)
	if user == nil {
		t.Fatalf("no consul-xds-bridge system user in /etc/passwd:\n%s", passwd)
	}
	if !regexp.MustCompile(`(?m)^consul-xds-bridge:x:` + user[2] + `:`).MatchString(readFile(t, root, "etc/group")) {
		t.Errorf("no consul-xds-bridge group %s in /etc/group", user[2])
	}

	// The files, with the modes and owners an operator expects.
	for p, want := range map[string]os.FileMode{
		"usr/bin/consul-xds-bridge":                          0o755,
		"etc/consul-xds-bridge":                              os.ModeDir | 0o750,
		"etc/consul-xds-bridge/config.hcl":                   0o644,
		"etc/consul-xds-bridge/admin-token":                  0o640,
		"lib/systemd/system/consul-xds-bridge.service":       0o644,
		"lib/systemd/system/consul-xds-bridge-agent.service": 0o644,
		"usr/lib/sysusers.d/consul-xds-bridge.conf":          0o644,
		"usr/share/man/man1/consul-xds-bridge.1.gz":          0o644,
		"usr/share/doc/consul-xds-bridge/copyright":          0o644,
		"usr/share/doc/consul-xds-bridge/changelog.gz":       0o644,
	} {
		fi, err := os.Stat(filepath.Join(root, p))
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		if fi.Mode()&(os.ModeDir|os.ModePerm) != want {
			t.Errorf("%s mode %v, want %v", p, fi.Mode(), want)
		}
	}
	for _, p := range []string{"etc/consul-xds-bridge", "etc/consul-xds-bridge/admin-token"} {
		if gid := fileGID(t, filepath.Join(root, p)); gid != user[2] {
			t.Errorf("%s group %s, want consul-xds-bridge (%s)", p, gid, user[2])
		}
	}
	if tok := strings.TrimSpace(readFile(t, root, "etc/consul-xds-bridge/admin-token")); len(tok) < 40 {
		t.Errorf("admin token %d characters, want 43 random ones", len(tok))
	}

	// The units, enabled as dh_installsystemd enables them.
	for _, u := range []string{"consul-xds-bridge.service", "consul-xds-bridge-agent.service"} {
		link, err := os.Readlink(filepath.Join(root, "etc/systemd/system/multi-user.target.wants", u))
		if err != nil || link != "/lib/systemd/system/"+u {
			t.Errorf("%s not enabled: %q %v", u, link, err)
		}
	}
	unit := readFile(t, root, "lib/systemd/system/consul-xds-bridge.service")
	for _, want := range []string{"Type=notify", "WatchdogSec=", "User=consul-xds-bridge",
		"ExecStart=/usr/bin/consul-xds-bridge run -config /etc/consul-xds-bridge/config.hcl", "StateDirectory=consul-xds-bridge", "WantedBy=multi-user.target"} {
		if !strings.Contains(unit, want) {
			t.Errorf("bridge unit lacks %q", want)
		}
	}
	agentUnit := readFile(t, root, "lib/systemd/system/consul-xds-bridge-agent.service")
	for _, want := range []string{"Type=notify", "ExecStart=/usr/bin/consul-xds-bridge agent -config /etc/consul-xds-bridge/agent.hcl",
		"ConditionPathExists=/etc/consul-xds-bridge/agent.hcl"} {
		if !strings.Contains(agentUnit, want) {
			t.Errorf("agent unit lacks %q", want)
		}
	}

	// The binary runs, accepts the packaged config (loopback, admin
	// token) and the shipped route tests pass against the shipped fixture.
	bin := filepath.Join(root, "usr/bin/consul-xds-bridge")
	if out := run(t, bin, "version"); !strings.Contains(out, "consul-xds-bridge 0.4.1") {
		t.Errorf("version = %q", out)
	}
	cfg := readFile(t, root, "etc/consul-xds-bridge/config.hcl")
	if !strings.Contains(cfg, `token_file = "/etc/consul-xds-bridge/admin-token"`) || !strings.Contains(cfg, `listen = "127.0.0.1:18000"`) {
		t.Errorf("default config is not loopback with an admin token:\n%s", cfg)
	}
	// validate reads the files the config names: point them into the root.
	rooted := filepath.Join(t.TempDir(), "config.hcl")
	if err := os.WriteFile(rooted, []byte(strings.ReplaceAll(cfg, `"/etc/`, `"`+root+`/etc/`)), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, bin, "validate", rooted)
	ex := filepath.Join(root, "usr/share/doc/consul-xds-bridge/examples")
	run(t, bin, "test", "-catalog", filepath.Join(ex, "edge-gateway.catalog.json"), filepath.Join(ex, "edge-gateway.hcl"), filepath.Join(ex, "edge-gateway.test.hcl"))
	for _, f := range []string{"agent.hcl", "config-central.hcl", "config-local.hcl", "README.md", "sidecar.hcl"} {
		if _, err := os.Stat(filepath.Join(ex, f)); err != nil {
			t.Errorf("sample missing: %v", err)
		}
	}
	if envoy := readFile(t, root, "usr/share/doc/consul-xds-bridge/examples/envoy.service"); strings.Contains(envoy, "/usr/local/bin/consul-xds-bridge") || !strings.Contains(envoy, "/usr/bin/consul-xds-bridge bootstrap") {
		t.Errorf("sample envoy.service does not call the packaged /usr/bin/consul-xds-bridge:\n%s", envoy)
	}

	// The README's and the docs' links to docs pages work in the package.
	docRoot := filepath.Join(root, "usr/share/doc/consul-xds-bridge")
	for _, broken := range brokenDocLinks(t, docRoot) {
		t.Errorf("packaged docs link to what the package lacks: %s", broken)
	}

	// Every packaged path the docs name exists.
	for _, p := range docPaths(t) {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("the docs name %s, which the package does not install", p)
		}
	}
}

// docPaths are the paths under /usr/share/doc/consul-xds-bridge, /etc and
// /lib/systemd that the README, docs/ and the packaged files mention.
func docPaths(t *testing.T) []string {
	t.Helper()
	files := []string{"../README.md", "../examples/vm/README.md", "deb/config.hcl", "deb/consul-xds-bridge.1"}
	more, _ := filepath.Glob("../docs/*/*.md")
	more2, _ := filepath.Glob("../docs/*.md")
	files = append(append(files, more...), more2...)
	re := regexp.MustCompile("/usr/share/doc/consul-xds-bridge/[A-Za-z0-9._/-]*[A-Za-z0-9]|/lib/systemd/system/consul-xds-bridge[a-z-]*\\.service")
	seen := map[string]bool{}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllString(string(b), -1) {
			if !seen[m] {
				seen[m] = true
				out = append(out, strings.TrimPrefix(m, "/"))
			}
		}
	}
	return out
}

// brokenDocLinks lists the links of the packaged README.md and docs/ pages
// to docs/ pages (or images) that are not installed: the README points
// there first, and an operator reads it offline.
func brokenDocLinks(t *testing.T, docRoot string) []string {
	t.Helper()
	pages := []string{filepath.Join(docRoot, "README.md")}
	if err := filepath.WalkDir(filepath.Join(docRoot, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			pages = append(pages, p)
		}
		return err
	}); err != nil {
		t.Fatalf("the package has no docs tree: %v", err)
	}
	if len(pages) < 10 {
		t.Fatalf("the package holds %d docs pages", len(pages))
	}
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)|src="([^"]+)"`)
	var broken []string
	for _, page := range pages {
		for _, m := range link.FindAllStringSubmatch(readFile(t, "/", page), -1) {
			target := m[1] + m[3]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			abs := filepath.Join(filepath.Dir(page), target)
			rel, err := filepath.Rel(filepath.Join(docRoot, "docs"), abs)
			if err != nil || strings.HasPrefix(rel, "..") {
				continue // not a docs page: source files stay in the repository
			}
			if _, err := os.Stat(abs); err != nil {
				broken = append(broken, strings.TrimPrefix(page, docRoot+"/")+" -> "+target)
			}
		}
	}
	return broken
}

func readFile(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
