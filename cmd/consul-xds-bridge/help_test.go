package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSubcommandHelp: `consul-xds-bridge SUB -h` exits 0 and prints, on
// stdout, the synopsis, what SUB does and its flags with their argument
// names; a bad flag exits 2 with flag's message and the same help on
// stderr.
func TestSubcommandHelp(t *testing.T) {
	subs := []string{"run", "agent", "agent redirect-traffic", "import", "validate", "test", "plan", "status", "bootstrap"}
	for name := range commands {
		if !slices.Contains(subs, name) {
			t.Errorf("help for %q, which the test does not know", name)
		}
	}
	wantFlags := map[string][]string{
		"run":                    {"-config FILE"},
		"agent":                  {"-config FILE"},
		"import":                 {"-consul", "-mesh"},
		"validate":               {"-strict", "-catalog", "-agent"},
		"test":                   {"-catalog", "-run"},
		"plan":                   {"-config FILE", "-cluster", "-node", "-admin", "-admin-token-file", "-kv-key"},
		"status":                 {"-admin", "-admin-token-file", "-config FILE"},
		"agent redirect-traffic": {"-proxy-uid", "-proxy-id", "-proxy-inbound-port", "-proxy-outbound-port", "-exclude-inbound-port", "-exclude-outbound-port", "-exclude-outbound-cidr", "-exclude-uid", "-remove"},
		"bootstrap":              {"-node-id", "-cluster", "-xds ADDRESS", "-xds-unix", "-tls-ca", "-tls-cert", "-tls-key", "-grpc", "-mesh-cert-dir", "-rest"},
	}
	for _, sub := range subs {
		t.Run(sub, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := realMain(append(strings.Fields(sub), "-h"), &out, &errOut); code != 0 {
				t.Errorf("exit %d", code)
			}
			if errOut.Len() > 0 {
				t.Errorf("-h wrote to stderr: %q", errOut.String())
			}
			help := out.String()
			if !strings.HasPrefix(help, "Usage: consul-xds-bridge "+sub+" ") || !strings.Contains(help, "\nFlags:\n") {
				t.Errorf("help lacks the synopsis or the flags:\n%s", help)
			}
			if strings.Contains(help, "Usage of "+sub) {
				t.Errorf("Go's bare usage line:\n%s", help)
			}
			for _, f := range wantFlags[sub] {
				if !strings.Contains(help, "  "+f) {
					t.Errorf("help lacks %q:\n%s", f, help)
				}
			}
			out.Reset()
			errOut.Reset()
			// plan's 2 means "changes" (TestPlanUsageErrorsAreErrors).
			want := 2
			if sub == "plan" {
				want = 1
			}
			if code := realMain(append(strings.Fields(sub), "-no-such-flag"), &out, &errOut); code != want {
				t.Errorf("a bad flag exits %d, want %d", code, want)
			}
			if !strings.Contains(errOut.String(), "flag provided but not defined: -no-such-flag") || !strings.Contains(errOut.String(), "Usage: consul-xds-bridge "+sub) {
				t.Errorf("a bad flag's stderr:\n%s", errOut.String())
			}
		})
	}
}

// TestConfigDirectory: -config DIR (and validate DIR) reads the *.hcl
// files of DIR in name order; a directory with none is refused with the
// reason.
func TestConfigDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10-policy.hcl", "service \"api\" {\n  connect_timeout = \"2s\"\n}\n")
	write("00-settings.hcl", "consul {\n  address = \"127.0.0.1:8500\"\n}\n")
	write("README.md", "not configuration")

	var c configPaths
	if err := c.Set(dir); err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, "00-settings.hcl"), filepath.Join(dir, "10-policy.hcl")}; !slices.Equal(c, want) {
		t.Errorf("-config DIR = %q, want %q", c, want)
	}

	var out, errOut bytes.Buffer
	if code := realMain([]string{"validate", dir}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "2 file(s) valid") {
		t.Errorf("validate DIR: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	// An error in the second file is reported at its own position.
	write("20-bad.hcl", "service \"web\" {\n  lb_policy = \"fastest\"\n}\n")
	out.Reset()
	errOut.Reset()
	if code := realMain([]string{"validate", dir}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), filepath.Join(dir, "20-bad.hcl")+":2:") {
		t.Errorf("validate DIR with a bad file: exit %d\n%s", code, errOut.String())
	}

	empty := t.TempDir()
	out.Reset()
	errOut.Reset()
	if code := realMain([]string{"run", "-config", empty}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "has no *.hcl file") {
		t.Errorf("run -config EMPTYDIR: exit %d\n%s", code, errOut.String())
	}
}
