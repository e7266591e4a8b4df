package bridge

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// TestConfigDumpStatus: /v1/config_dump answers a group that never
// translated (nothing to serve it) with 503, as REST does, not 500.
func TestConfigDumpStatus(t *testing.T) {
	for err, want := range map[error]int{
		serve.ErrNoGoodState:                      http.StatusServiceUnavailable,
		fmt.Errorf("x: %w", serve.ErrNotReady):    http.StatusServiceUnavailable,
		fmt.Errorf("x: %w", serve.ErrUnknownNode): http.StatusNotFound,
		fmt.Errorf("something else"):              http.StatusInternalServerError,
	} {
		if got := configDumpStatus(err); got != want {
			t.Errorf("%v: %d, want %d", err, got, want)
		}
	}
}
