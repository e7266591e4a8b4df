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

// TestBearerSchemeCaseInsensitive: the admin API takes the token under
// any case of the scheme name, as HTTP's authentication schemes are case-
// insensitive; anything but the Bearer scheme is no token.
func TestBearerSchemeCaseInsensitive(t *testing.T) {
	for header, want := range map[string]string{"Bearer t0k": "t0k", "bearer t0k": "t0k", "BEARER  t0k": "t0k", "Basic t0k": "", "Bearert0k": "", "": ""} {
		got, ok := bearerToken(header)
		if got != want || ok != (want != "") {
			t.Errorf("%q: %q %v, want %q", header, got, ok, want)
		}
	}
}
