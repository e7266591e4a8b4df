package consul

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/boundedread"
)

// maxTokenFileBytes bounds a Consul ACL token file: a token is a UUID.
const maxTokenFileBytes = 4 << 10

// ClientConfig is how to reach Consul. Empty fields keep what Consul's own
// environment variables (CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN,
// CONSUL_HTTP_TOKEN_FILE, CONSUL_CACERT, ...) say, as api.DefaultConfig does.
type ClientConfig struct {
	Address    string
	Datacenter string
	// TokenFile holds the ACL token; NewClient reads it once (a regular
	// file of at most 4 KiB, within a deadline), and it is never logged.
	TokenFile string
	// MaxConns caps connections to the agent; zero means 100. Keep it under
	// the agent's limits.http_max_conns_per_client (200 by default, shared
	// with every other client on the host), or the agent answers 429. A
	// Watcher's Config.MaxQueries must stay below it: a request the
	// transport has to queue for a connection is already running its
	// timeout.
	MaxConns int
}

// NewClient builds a Consul API client.
func NewClient(c ClientConfig) (*api.Client, error) {
	cfg := api.DefaultConfig()
	if c.Address != "" {
		cfg.Address = c.Address
	}
	if c.Datacenter != "" {
		cfg.Datacenter = c.Datacenter
	}
	if c.TokenFile != "" {
		cfg.TokenFile = c.TokenFile
		cfg.Token = ""
	}
	if cfg.TokenFile != "" {
		// Read here, bounded (a regular file of at most maxTokenFileBytes,
		// within a deadline), not by Consul's client, which reads whatever
		// the path is: a FIFO named by consul.token_file or
		// CONSUL_HTTP_TOKEN_FILE held the start forever.
		b, err := boundedread.Read(context.Background(), cfg.TokenFile, maxTokenFileBytes)
		if err != nil {
			return nil, fmt.Errorf("consul token file: %w", err)
		}
		cfg.Token, cfg.TokenFile = strings.TrimSpace(string(b)), ""
	}
	maxConns := c.MaxConns
	if maxConns <= 0 {
		maxConns = 100
	}
	// The default pooled transport keeps only GOMAXPROCS+1 idle connections
	// per host, so with dozens of long polls taking turns most connections
	// would be torn down and re-dialled after every response.
	if cfg.Transport != nil {
		cfg.Transport.MaxIdleConnsPerHost = maxConns
		cfg.Transport.MaxConnsPerHost = maxConns
	}
	client, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul client for %s: %w", cfg.Address, err)
	}
	return client, nil
}
