package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestValidateRefusesWhatRunRefuses: a token or TLS file a daemon setting
// names that does not exist (or is no regular file) fails validate, at
// the setting's file:line:col, as it fails `run` at start. (validate
// used to say "1 file(s) valid", and the unit's ExecStartPre= with it.)
func TestValidateRefusesWhatRunRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		settings, want string
	}{
		"consul token":  {"consul {\n  token_file = \"/nonexistent/token\"\n}\n", ":2:3: Cannot read the Consul ACL token file"},
		"admin token":   {"admin {\n  listen = \"127.0.0.1:0\"\n  token_file = \"/nonexistent/admin\"\n}\n", ":3:3: Cannot read the admin token file"},
		"xds cert":      {"xds {\n  tls {\n    cert_file = \"/nonexistent/c.pem\"\n    key_file = \"/nonexistent/k.pem\"\n  }\n}\n", ":3:5: Cannot read the xDS server certificate"},
		"a device":      {"consul {\n  token_file = \"/dev/zero\"\n}\n", "not a regular file"},
		"state not dir": {"consul {\n  state_dir = \"/dev/null\"\n}\n", "State directory not writable"},
	} {
		t.Run(name, func(t *testing.T) {
			f := writeTemp(t, "config.hcl", tc.settings+"export_all_services = true\n")
			var out, errOut bytes.Buffer
			code := realMain([]string{"validate", f}, &out, &errOut)
			if code != 1 || !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, errOut.String(), tc.want)
			}
		})
	}
}

// TestValidateWarnsLikeTheDaemon: a route to a misspelt service is a
// warning with a suggestion when a catalog is given, and -strict (for CI)
// fails on it; without a catalog the "no instances" warnings, which say
// nothing then, are left out.
func TestValidateWarnsLikeTheDaemon(t *testing.T) {
	pol := writeTemp(t, "p.hcl", `service "api" {
  connect_timeout = "1s"
}
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      domains = ["*"]
      route {
        match {
          path_prefix = "/"
        }
        service = "apj"
      }
    }
  }
}
`)
	cat := "../../examples/policies/edge-gateway.catalog.json"
	var out, errOut bytes.Buffer
	if code := realMain([]string{"validate", pol, "-catalog", cat}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), `warning: service "apj" has no instances`) || !strings.Contains(errOut.String(), `did you mean "api"?`) {
		t.Errorf("validate with a catalog: exit %d, stderr %q; want 0 and a warning suggesting api", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := realMain([]string{"validate", "-strict", pol, "-catalog", cat}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "-strict") {
		t.Errorf("validate -strict: exit %d, stderr %q; want 1", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := realMain([]string{"validate", "-strict", pol}, &out, &errOut); code != 0 || strings.Contains(errOut.String(), "no instances") {
		t.Errorf("validate -strict without a catalog: exit %d, stderr %q; want 0 and no catalog warnings", code, errOut.String())
	}
}

// TestValidateReadsAgentConfigs: the shipped agent configuration is read
// as one (it used to give 8 "Unsupported argument" errors): its only
// errors are the TLS files it names, which do not exist here, each at
// its line with the source line and a caret; with them present, it is
// valid.
func TestValidateReadsAgentConfigs(t *testing.T) {
	var out, errOut bytes.Buffer
	code := realMain([]string{"validate", "../../examples/vm/agent.hcl"}, &out, &errOut)
	var errs []string
	for _, l := range strings.Split(errOut.String(), "\n") {
		if strings.HasPrefix(l, "../../examples/vm/agent.hcl:") {
			errs = append(errs, l)
		}
	}
	if code != 1 || len(errs) != 3 || strings.Contains(errOut.String(), "Unsupported argument") || !strings.Contains(errOut.String(), "|     ca_file") || !strings.Contains(errOut.String(), "^^^") {
		t.Fatalf("validate agent.hcl: exit %d, stderr:\n%s\nwant exit 1 and three errors, about its TLS files, with source lines", code, errOut.String())
	}
	for _, e := range errs {
		if !strings.Contains(e, "Cannot read the") || !strings.Contains(e, "/etc/consul-xds-bridge/") {
			t.Errorf("unexpected error: %s", e)
		}
	}
}

// TestValidateRefusesWhatEnvoyRefuses: a path_regex whose RE2 program is
// over Envoy's default limit (re2.max_program_size.error_level, 100) is
// an error at its position (validate used to say "1 file(s) valid", and
// every Envoy would then NACK the route configuration); a common one
// passes.
func TestValidateRefusesWhatEnvoyRefuses(t *testing.T) {
	policy := func(re string) string {
		return "proxy \"edge\" {\n  listener \"http\" {\n    port = 8080\n    virtual_host \"all\" {\n      route {\n        match {\n          path_regex = \"" + re + "\"\n        }\n        service = \"web\"\n      }\n    }\n  }\n}\n"
	}
	var out, errOut bytes.Buffer
	big := writeTemp(t, "big.hcl", policy("^/(alpha|beta|gamma|delta|epsilon|zeta|eta|theta|iota|kappa|lambda|mu)/[a-z0-9]{3,12}/(x|y|z)+$"))
	if code := realMain([]string{"validate", big}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), big+":7:") {
		t.Errorf("an over-limit path_regex: exit %d, stderr %q; want 1 at line 7", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	ok := writeTemp(t, "ok.hcl", policy("^/api/v[0-9]+/.*"))
	if code := realMain([]string{"validate", ok}, &out, &errOut); code != 0 {
		t.Errorf("a common path_regex: exit %d, stderr %q", code, errOut.String())
	}
}

// TestValidateAgentEnvoyBinary: an envoy block whose binary is missing
// or not executable is an error at the block, as the agent could not
// start that Envoy.
func TestValidateAgentEnvoyBinary(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "envoy")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "agent.hcl")
	src := fmt.Sprintf("allow_groups = [\"web\"]\ndata_dir = %q\nupstream {\n  addresses = [\"b:1\"]\n}\nenvoy \"web\" {\n  cluster = \"web\"\n  binary = %q\n}\nenvoy \"gone\" {\n  cluster = \"web\"\n  admin_port = 19002\n  binary = \"/nonexistent/envoy\"\n}\n", dir, notExec)
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := realMain([]string{"validate", cfg}, &out, &errOut)
	got := errOut.String()
	if code != 1 || !strings.Contains(got, "agent.hcl:6:1: Envoy binary not executable: envoy \"web\"") || !strings.Contains(got, "agent.hcl:10:1: Envoy binary not executable: envoy \"gone\"") {
		t.Fatalf("exit %d, stderr:\n%s\nwant both envoy blocks refused at their lines", code, got)
	}
}

// TestValidateAdminTokenLimitIsTheDaemons: the daemon reads
// admin.token_file within 4 KiB (a token is a line) and refuses to start
// with a larger one, so validate refuses it too, where it used to pass it
// within the 1 MiB of other setting files.
func TestValidateAdminTokenLimitIsTheDaemons(t *testing.T) {
	token := writeTemp(t, "admin-token", strings.Repeat("t", 8<<10))
	f := writeTemp(t, "config.hcl", fmt.Sprintf("admin {\n  listen = \"127.0.0.1:0\"\n  token_file = %q\n}\nexport_all_services = true\n", token))
	var out, errOut bytes.Buffer
	code := realMain([]string{"validate", f}, &out, &errOut)
	if want := "over the limit of 4096"; code != 1 || !strings.Contains(errOut.String(), want) || !strings.Contains(errOut.String(), ":3:3: Cannot read the admin token file") {
		t.Errorf("exit %d, stderr %q; want 1, the setting's position and %q", code, errOut.String(), want)
	}
}

// TestValidateSaysWhatItDidNotRead: with KV documents or config entries
// in the settings, "valid" covers the files alone (a service defined in
// a file and in an entry is rejected by the bridge and by plan, not by
// validate), and validate says so.
func TestValidateSaysWhatItDidNotRead(t *testing.T) {
	for _, settings := range []string{"kv_prefix = \"xds/\"", "config_entries = true"} {
		file := filepath.Join(t.TempDir(), "c.hcl")
		src := "consul {\n  " + settings + "\n}\nservice \"web\" {\n  connect_timeout = \"2s\"\n}\n"
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if code := realMain([]string{"validate", file}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "were not read: consul-xds-bridge plan reads them") {
			t.Errorf("%s: exit %d\n%s%s", settings, code, out.String(), errOut.String())
		}
	}
}
