package agent

import (
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/hostilefile"
)

// TestUpstreamCAFileReadBounded: the CA the agent verifies the central
// bridges with is read on each dial; a FIFO in its place is refused at
// once, naming the setting, instead of holding the relay's dial forever.
func TestUpstreamCAFileReadBounded(t *testing.T) {
	fifo := hostilefile.FIFO(t, "ca.pem")
	a := &Agent{cfg: &Config{TLS: UpstreamTLS{CAFile: fifo}}}
	hostilefile.Refused(t, "the upstream CA", "upstream tls ca_file: read "+fifo+": not a regular file (a FIFO)", func() error {
		_, err := a.upstreamTLS("127.0.0.1:1")
		return err
	})
}
