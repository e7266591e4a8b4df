package agent

import (
	"sync"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
)

// consulClients hands out the agent's one client of the local Consul
// agent (replica discovery, sidecar registrations, Connect leaves), made
// as the bridge daemon makes its own (consul.NewClient): consul_address,
// else CONSUL_HTTP_ADDR, else 127.0.0.1:8500; CONSUL_HTTP_TOKEN or
// CONSUL_HTTP_TOKEN_FILE (read bounded: a FIFO there must not hold the
// agent), and Consul's TLS variables (CONSUL_HTTP_SSL, CONSUL_CACERT...).
// A failure (an unreadable token file) is returned each time, so the
// callers' retries pick up a fixed file; a success is kept, so every
// caller shares its connections.
type consulClients struct {
	address string
	mu      sync.Mutex
	client  *api.Client
}

func (c *consulClients) get() (*api.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client != nil {
		return c.client, nil
	}
	cl, err := consul.NewClient(consul.ClientConfig{Address: c.address})
	if err != nil {
		return nil, err
	}
	c.client = cl
	return cl, nil
}
