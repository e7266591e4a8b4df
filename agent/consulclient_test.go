package agent

import (
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/hostilefile"
)

// The agent's Consul client reads CONSUL_HTTP_TOKEN_FILE as the daemon
// does, bounded: a FIFO there is refused at once (Consul's own client
// would wait on it forever, holding replica discovery and the Connect
// leaves), and once the file is fixed the next call succeeds.
func TestConsulTokenFileReadBounded(t *testing.T) {
	t.Setenv("CONSUL_HTTP_TOKEN", "")
	t.Setenv("CONSUL_HTTP_TOKEN_FILE", hostilefile.FIFO(t, "token"))
	c := &consulClients{address: "127.0.0.1:8500"}
	hostilefile.Refused(t, "CONSUL_HTTP_TOKEN_FILE", "consul token file", func() error {
		_, err := c.get()
		return err
	})
	t.Setenv("CONSUL_HTTP_TOKEN_FILE", "")
	t.Setenv("CONSUL_HTTP_TOKEN", "t0ken")
	cl, err := c.get()
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.get(); again != cl {
		t.Error("a second call made another client; every caller should share one")
	}
}
