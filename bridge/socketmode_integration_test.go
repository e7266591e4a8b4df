package bridge_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
)

// TestWorldOpenXDSSocketIsWarned: an xDS Unix socket every local user
// may connect to (socket_mode 0666) starts with a warning naming the
// setting (it used to start silently); 0660 starts without one.
func TestWorldOpenXDSSocketIsWarned(t *testing.T) {
	agent := consultest.Start(t)
	for mode, warned := range map[uint32]bool{0o666: true, 0o660: false} {
		var logs syncbuffer.Buffer
		startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
			c.Settings.XDS.Listen = "unix://" + filepath.Join(t.TempDir(), "xds.sock")
			c.Settings.XDS.SocketMode = os.FileMode(mode)
			c.Logger = zerolog.New(&logs)
		})
		deadline := time.Now().Add(2 * time.Second)
		for !strings.Contains(logs.String(), "serving admin HTTP") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := strings.Contains(logs.String(), `"setting":"xds.socket_mode"`); got != warned {
			t.Errorf("socket_mode %#o: warned %v, want %v\n%s", mode, got, warned, logs.String())
		}
	}
}
