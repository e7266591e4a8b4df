package packaging

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
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
			// Each proxy holds one descriptor of the bridge's
			// (docs/operations/failure-behaviour.md names this limit).
			if strings.HasSuffix(unit, "consul-xds-bridge.service") && !regexp.MustCompile(`(?m)^LimitNOFILE=65536$`).MatchString(src) {
				t.Errorf("%s lacks LimitNOFILE=65536", unit)
			}
		})
	}
}

// TestAgentUnitLetsEnvoyDrain: the agent drains the Envoys it runs before
// stopping them, so its unit must send SIGTERM to the agent alone
// (KillMode=mixed; the default control-group kills the Envoys at once,
// mid-request) and wait longer than the default drain time.
func TestAgentUnitLetsEnvoyDrain(t *testing.T) {
	for _, unit := range []string{"deb/consul-xds-bridge-agent.service", "../examples/vm/consul-xds-bridge-agent.service"} {
		src := readFile(t, ".", unit)
		if !regexp.MustCompile(`(?m)^KillMode=mixed$`).MatchString(src) {
			t.Errorf("%s: no KillMode=mixed: stopping the agent would SIGTERM its Envoys without a drain", unit)
		}
		m := regexp.MustCompile(`(?m)^TimeoutStopSec=([0-9]+)$`).FindStringSubmatch(src)
		if m == nil {
			t.Errorf("%s: no TimeoutStopSec", unit)
			continue
		}
		if sec, _ := strconv.Atoi(m[1]); time.Duration(sec)*time.Second < agent.DefaultEnvoyDrainTime+15*time.Second {
			t.Errorf("%s: TimeoutStopSec=%d kills the agent before its Envoys' default drain (%v) and stop (15 s) end", unit, sec, agent.DefaultEnvoyDrainTime)
		}
		// What docs/agent-envoy.md says the unit of an agent running
		// Envoys needs.
		for _, want := range []string{"ExecReload=/bin/kill -HUP $MAINPID", "LimitNOFILE=1048576"} {
			if !strings.Contains(src, want) {
				t.Errorf("%s lacks %s", unit, want)
			}
		}
		if regexp.MustCompile(`(?m)^MemoryDenyWriteExecute=yes`).MatchString(src) {
			t.Errorf("%s: MemoryDenyWriteExecute holds for the Envoys the agent runs", unit)
		}
	}
}

// TestEnvoySampleDrains: the sample envoy.service drains Envoy through its
// admin interface before systemd's SIGTERM (on which Envoy exits at once)
// and says what it is still for.
func TestEnvoySampleDrains(t *testing.T) {
	src := readFile(t, ".", "../examples/vm/envoy.service")
	if !regexp.MustCompile(`(?m)^ExecStop=.*POST .*/drain_listeners\?graceful`).MatchString(src) {
		t.Error("envoy.service stops Envoy without POST /drain_listeners?graceful first")
	}
	if strings.Contains(src, "drains listeners on SIGTERM") {
		t.Error("envoy.service claims Envoy drains on SIGTERM, which Envoy's docs contradict")
	}
	if !strings.Contains(src, "agent does not run") {
		t.Error("envoy.service does not say what it is for beside the agent's envoy blocks")
	}
}

// TestRuntimeDirectoryReachable: the agent's socket lives in
// /run/consul-xds-bridge, which both units create. Members of
// socket_group (Envoy, proxyless gRPC apps) are neither its owner nor in
// its group, so they must be able to pass through it (others' execute
// bit; the socket's own 0660 mode decides who connects), and stopping
// either unit must not remove it (systemd removes a unit's
// RuntimeDirectory on stop unless RuntimeDirectoryPreserve=yes): the
// bridge stopped on an agent VM took the agent's socket with it.
func TestRuntimeDirectoryReachable(t *testing.T) {
	for _, unit := range []string{"deb/consul-xds-bridge.service", "deb/consul-xds-bridge-agent.service",
		"../examples/vm/consul-xds-bridge.service", "../examples/vm/consul-xds-bridge-agent.service"} {
		src := readFile(t, ".", unit)
		if !regexp.MustCompile(`(?m)^RuntimeDirectory=consul-xds-bridge$`).MatchString(src) {
			continue
		}
		m := regexp.MustCompile(`(?m)^RuntimeDirectoryMode=([0-7]+)$`).FindStringSubmatch(src)
		if m == nil {
			t.Errorf("%s: no RuntimeDirectoryMode (systemd's 0755 lets anyone list it)", unit)
		} else if mode, _ := strconv.ParseUint(m[1], 8, 32); mode&0o001 == 0 || mode&0o004 != 0 {
			t.Errorf("%s: RuntimeDirectoryMode=%s: socket_group's members cannot reach the agent's socket without others' execute bit (and need not list it)", unit, m[1])
		}
		if !regexp.MustCompile(`(?m)^RuntimeDirectoryPreserve=yes$`).MatchString(src) {
			t.Errorf("%s: stopping it removes /run/consul-xds-bridge and the agent's socket in it", unit)
		}
	}
}
