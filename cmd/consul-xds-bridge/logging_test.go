package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// TestLogFormat: durations carry their unit ("8.939026ms", not the bare
// 8.939026); console logs have no ANSI colours in a file or a buffer, nor
// with $NO_COLOR.
func TestLogFormat(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(policy.LogSettings{Level: "info", Format: "json"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Dur("build", 8939026*time.Nanosecond).Dur("retry_in", 364829192*time.Microsecond).Msg("x")
	if !strings.Contains(buf.String(), `"build":"8.939026ms"`) || !strings.Contains(buf.String(), `"retry_in":"6m4.829192s"`) {
		t.Errorf("durations without units: %s", buf.String())
	}

	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, w := range map[string]*os.File{"a file": f} {
		if colorful(w) {
			t.Errorf("colours to %s", name)
		}
	}
	buf.Reset()
	log, _ = newLogger(policy.LogSettings{Level: "info", Format: "console"}, &buf)
	log.Warn().Dur("build", time.Millisecond).Msg("snapshot updated")
	if strings.Contains(buf.String(), "\x1b[") || !strings.Contains(buf.String(), "build=1ms") {
		t.Errorf("console log to a buffer: %q", buf.String())
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if !colorful(tty) {
			t.Error("no colours on a terminal")
		}
		t.Setenv("NO_COLOR", "1")
		if colorful(tty) {
			t.Error("colours on a terminal with NO_COLOR set")
		}
	}
}

// TestBuildInfoMetric: consul_xds_bridge_build_info is 1 with the
// version `version` prints.
func TestBuildInfoMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	registerBuildInfo(reg)
	ver, rev, gcp := buildInfo()
	want := `# HELP consul_xds_bridge_build_info 1, labelled with the version, commit, Go version and go-control-plane version of this binary.
# TYPE consul_xds_bridge_build_info gauge
consul_xds_bridge_build_info{go_control_plane="` + gcp + `",goversion="` + runtimeVersion() + `",revision="` + rev + `",version="` + ver + `"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "consul_xds_bridge_build_info"); err != nil {
		t.Error(err)
	}
	var out bytes.Buffer
	printVersion(&out)
	if !strings.Contains(out.String(), "consul-xds-bridge "+ver+"\ncommit: "+rev+"\ngo-control-plane: "+gcp) {
		t.Errorf("version prints %q", out.String())
	}
}

func runtimeVersion() string { return runtime.Version() }
