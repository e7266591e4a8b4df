package main

import (
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/testhome"
)

// TestMain keeps the tests off the user's own configuration directory,
// where the bridge's default admin token file lives (internal/testhome).
func TestMain(m *testing.M) { testhome.Main(m) }
