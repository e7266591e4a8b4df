package packaging

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// maxExposure is the highest `systemd-analyze security` score a packaged
// unit may have (0 is locked down, 10 is UNSAFE; 8.5, the score of the
// old Type=simple unit, is EXPOSED).
const maxExposure = 3.0

// TestUnitsHardened scores each packaged unit with systemd-analyze
// security (offline, from the file) and checks it is a Type=notify unit
// with a watchdog, so `systemctl start` returns when the daemon is ready.
func TestUnitsHardened(t *testing.T) {
	analyze := need(t, "systemd-analyze", "scripts/install-debtools.sh")
	// The packaged units, and the samples for installing by hand.
	for _, unit := range []string{"deb/consul-xds-bridge.service", "deb/consul-xds-bridge-agent.service",
		"../examples/vm/consul-xds-bridge.service", "../examples/vm/consul-xds-bridge-agent.service"} {
		t.Run(unit, func(t *testing.T) {
			out, err := exec.Command(analyze, "security", "--offline=true", "--no-pager", "./"+unit).CombinedOutput()
			if err != nil {
				t.Fatalf("systemd-analyze security %s: %v\n%s", unit, err, out)
			}
			m := regexp.MustCompile(`Overall exposure level for [^:]+: ([0-9.]+)`).FindSubmatch(out)
			if m == nil {
				t.Fatalf("no exposure level in:\n%s", out)
			}
			score, _ := strconv.ParseFloat(string(m[1]), 64)
			t.Logf("%s: exposure %.1f", unit, score)
			if score > maxExposure {
				t.Errorf("%s: exposure %.1f, want <= %.1f:\n%s", unit, score, maxExposure, out)
			}
			src := readFile(t, ".", unit)
			// socket_group chowns the socket: the filter must leave chown(2).
			for _, want := range []string{"Type=notify", "NotifyAccess=main", "WatchdogSec=", "User=consul-xds-bridge", "SystemCallFilter=@chown"} {
				if !strings.Contains(src, want) {
					t.Errorf("%s lacks %s", unit, want)
				}
			}
		})
	}
}
