package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDebianPackage builds the .deb as `make package` does and inspects
// it with dpkg-deb: the binary, the systemd unit running it as the
// package's system user, the default config as a conffile that the
// packaged binary validates, and maintainer scripts that create the user
// and the admin token.
func TestDebianPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and a package")
	}
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal("dpkg-deb not found (Debian's dpkg); CI builds the package")
		}
		t.Skip("dpkg-deb not found (Debian's dpkg)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "consul-xds-bridge")
	run(t, "go", "build", "-o", bin, "../cmd/consul-xds-bridge")
	deb := strings.TrimSpace(run(t, "./build-deb.sh", bin, "v1.2.3-4-gabc", filepath.Join(dir, "out")))
	if filepath.Base(deb) != "consul-xds-bridge_1.2.3+4+gabc_"+arch(t)+".deb" {
		t.Errorf("package file %s", deb)
	}

	fields := run(t, "dpkg-deb", "-f", deb, "Package", "Version", "Depends")
	for _, want := range []string{"Package: consul-xds-bridge", "Version: 1.2.3+4+gabc", "Depends: adduser"} {
		if !strings.Contains(fields, want) {
			t.Errorf("control lacks %q:\n%s", want, fields)
		}
	}
	contents := run(t, "dpkg-deb", "-c", deb)
	for _, want := range []string{
		"-rwxr-xr-x root/root", "./usr/bin/consul-xds-bridge",
		"./lib/systemd/system/consul-xds-bridge.service",
		"-rw-r----- root/root", "./etc/consul-xds-bridge/config.hcl",
		"./usr/share/doc/consul-xds-bridge/examples/config-central.hcl",
	} {
		if !strings.Contains(contents, want) {
			t.Errorf("package lacks %q:\n%s", want, contents)
		}
	}

	x := filepath.Join(dir, "x")
	run(t, "dpkg-deb", "-x", deb, x)
	run(t, "dpkg-deb", "-e", deb, filepath.Join(x, "DEBIAN"))
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(x, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if c := read("DEBIAN/conffiles"); strings.TrimSpace(c) != "/etc/consul-xds-bridge/config.hcl" {
		t.Errorf("conffiles = %q", c)
	}
	unit := read("lib/systemd/system/consul-xds-bridge.service")
	for _, want := range []string{"User=consul-xds-bridge", "ExecStart=/usr/bin/consul-xds-bridge run -config /etc/consul-xds-bridge/config.hcl", "StateDirectory=consul-xds-bridge", "WantedBy=multi-user.target"} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	post := read("DEBIAN/postinst")
	for _, want := range []string{"adduser --system", "admin-token", "systemctl enable"} {
		if !strings.Contains(post, want) {
			t.Errorf("postinst lacks %q", want)
		}
	}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		run(t, "sh", "-n", filepath.Join(x, "DEBIAN", s))
	}
	// The packaged binary runs and accepts the packaged config; that
	// config is secure by default (admin token on loopback).
	if out := run(t, filepath.Join(x, "usr/bin/consul-xds-bridge"), "version"); !strings.Contains(out, "consul-xds-bridge") {
		t.Errorf("version = %q", out)
	}
	// validate fails on an admin token file that does not exist, as run
	// does: check the config with the token postinst writes at install,
	// here in a scratch file at the same place in the config.
	token := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(token, []byte("t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.hcl")
	if err := os.WriteFile(cfg, []byte(strings.Replace(read("etc/consul-xds-bridge/config.hcl"), "/etc/consul-xds-bridge/admin-token", token, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, filepath.Join(x, "usr/bin/consul-xds-bridge"), "validate", cfg)
	if out, err := exec.Command(filepath.Join(x, "usr/bin/consul-xds-bridge"), "validate", filepath.Join(x, "etc/consul-xds-bridge/config.hcl")).CombinedOutput(); err == nil && !fileExists("/etc/consul-xds-bridge/admin-token") {
		t.Errorf("validate accepted a config whose admin token file does not exist (run refuses it):\n%s", out)
	}
	if c := read("etc/consul-xds-bridge/config.hcl"); !strings.Contains(c, `token_file = "/etc/consul-xds-bridge/admin-token"`) || !strings.Contains(c, `listen = "127.0.0.1:18000"`) {
		t.Errorf("default config is not loopback with an admin token:\n%s", c)
	}
}

func arch(t *testing.T) string {
	out, err := exec.Command("dpkg", "--print-architecture").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
