package packaging

import (
	"bufio"
	"path/filepath"
	"strings"
	"testing"
)

// serviceSettings reads the [Service] section of a systemd unit: each
// key's values in order (a key may repeat). Comments and other sections
// are left out.
func serviceSettings(t *testing.T, src string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(src))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("not KEY=VALUE in [Service]: %q", line)
			}
			out[strings.TrimSpace(k)] = append(out[strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return out
}

// TestBridgeUnitReloadSendsSIGHUP: `systemctl reload consul-xds-bridge`
// re-reads the policy (README). systemctl runs the unit's ExecReload,
// which must send SIGHUP to the main process, and the main process must
// be `consul-xds-bridge run` itself (Type=notify: $MAINPID is the
// ExecStart process), whose SIGHUP handler reloads
// (cmd/consul-xds-bridge TestRunReloadsPolicyOnSIGHUP). The packaged unit
// is the one nfpm installs as consul-xds-bridge.service; the sample for
// installing by hand must say the same.
func TestBridgeUnitReloadSendsSIGHUP(t *testing.T) {
	nfpm := readFile(t, ".", "nfpm.yaml")
	if !strings.Contains(nfpm, "src: ./deb/consul-xds-bridge.service\n    dst: /lib/systemd/system/consul-xds-bridge.service") {
		t.Fatalf("nfpm.yaml does not install deb/consul-xds-bridge.service as the unit consul-xds-bridge.service:\n%s", nfpm)
	}
	for _, unit := range []string{"deb/consul-xds-bridge.service", "../examples/vm/consul-xds-bridge.service"} {
		t.Run(unit, func(t *testing.T) {
			s := serviceSettings(t, readFile(t, ".", unit))
			if got := s["ExecReload"]; len(got) != 1 || got[0] != "/bin/kill -HUP $MAINPID" {
				t.Errorf("ExecReload = %q, want one: /bin/kill -HUP $MAINPID", got)
			}
			if got := s["Type"]; len(got) != 1 || got[0] != "notify" {
				t.Errorf("Type = %q, want notify (the main process is the one ExecStart starts)", got)
			}
			start := s["ExecStart"]
			if len(start) != 1 {
				t.Fatalf("ExecStart = %q, want one", start)
			}
			args := strings.Fields(start[0])
			if len(args) < 2 || filepath.Base(args[0]) != "consul-xds-bridge" || args[1] != "run" {
				t.Errorf("ExecStart = %q: the main process, which gets the SIGHUP, must be `consul-xds-bridge run`", start[0])
			}
		})
	}
}
