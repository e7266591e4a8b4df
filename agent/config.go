package agent

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/unixsock"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// Config is the agent's configuration (agent.hcl).
type Config struct {
	// NodeID names this agent to the central bridge (its streams' node.id);
	// default: the host name.
	NodeID string
	// DataDir keeps the last good config of every local node.cluster, so a
	// restarted agent serves it while the central bridge is unreachable.
	DataDir string
	// AllowGroups are path.Match patterns of the node.cluster values local
	// proxies may claim; AllowNodeIDs those of node.id (default "*").
	AllowGroups  []string
	AllowNodeIDs []string

	// Socket is the Unix socket local proxies connect to, with its mode
	// and group; TCP, if set, a loopback address served too.
	Socket      string
	SocketMode  os.FileMode
	SocketGroup string
	TCP         string

	// ConsulAddress is the local Consul agent (replica discovery, Connect
	// certificates); empty: CONSUL_HTTP_ADDR, else 127.0.0.1:8500. Its
	// token comes from CONSUL_HTTP_TOKEN or CONSUL_HTTP_TOKEN_FILE
	// (consulclient.go).
	// Upstream: the central bridge replicas, a static list or a Consul
	// service whose passing instances are the replicas.
	Upstreams     []string
	ConsulService string
	ConsulAddress string
	TLS           UpstreamTLS

	// ConnectServices are the local services whose Connect leaf
	// certificates (and the CA roots) the agent serves over SDS, from the
	// local Consul agent (ConsulAddress).
	ConnectServices []string
	// Leaf says, per connect service, who acts for it and so gets its
	// leaf (with its private key): its Connect sidecar registered on the
	// local Consul agent (node.id = the proxy's service id), and the
	// node.cluster values listed; both only from a socket peer whose uid
	// or gid is allowed (leafaccess.go). A service without an entry gets
	// the defaults (DefaultLeafAccess).
	Leaf map[string]LeafAccess
	// CertDir, if set, is where the agent also writes each connect
	// service's leaf, key and the roots as PEM files (CertDir/SERVICE/
	// cert.pem, key.pem, roots.pem; mode 0600, replaced atomically on
	// every rotation), for proxyless gRPC's file_watcher certificate
	// provider, which reads files and cannot take SDS (certfiles.go).
	CertDir string

	// MaxMessageSize bounds one response relayed from the central bridge
	// (default adsclient.DefaultMaxMessageSize, what the bridge sends).
	MaxMessageSize int

	AdminListen string
	LogLevel    string
	// Backoff bounds the wait between reconnection attempts.
	BackoffInitial, BackoffMax time.Duration
	// RelayLinger is how long a node.cluster is still relayed after its
	// last local proxy has gone (default 10m).
	RelayLinger time.Duration

	// Envoys are the local Envoys the agent runs (envoy blocks, envoy.go);
	// EnvoyBackoffInitial and EnvoyBackoffMax bound the wait before
	// restarting one that exited (defaults 1s and 30s).
	Envoys                               []EnvoyConfig
	EnvoyBackoffInitial, EnvoyBackoffMax time.Duration
}

// UpstreamTLS is how the agent reaches the central bridge: verified with
// CAFile (for ServerName, default the address's host), presenting
// CertFile/KeyFile (the agent's own identity, for authorize_nodes).
type UpstreamTLS struct {
	CAFile, CertFile, KeyFile, ServerName string
}

type fileSchema struct {
	NodeID        *string       `hcl:"node_id,optional"`
	ConsulAddress *string       `hcl:"consul_address,optional"`
	DataDir       *string       `hcl:"data_dir,optional"`
	AllowGroups   []string      `hcl:"allow_groups"`
	AllowNodeIDs  []string      `hcl:"allow_node_ids,optional"`
	Listen        *listenBlock  `hcl:"listen,block"`
	Upstream      upstreamBlock `hcl:"upstream,block"`
	Admin         *adminBlock   `hcl:"admin,block"`
	Connect       *connectBlock `hcl:"connect,block"`
	LogLevel      *string       `hcl:"log_level,optional"`
	Envoys        []envoyBlock  `hcl:"envoy,block"`
}

type listenBlock struct {
	Socket      *string `hcl:"socket,optional"`
	SocketMode  *string `hcl:"socket_mode,optional"`
	SocketGroup *string `hcl:"socket_group,optional"`
	TCP         *string `hcl:"tcp,optional"`
}

type upstreamBlock struct {
	Addresses      []string  `hcl:"addresses,optional"`
	ConsulService  *string   `hcl:"consul_service,optional"`
	MaxMessageSize *string   `hcl:"max_message_size,optional"`
	TLS            *tlsBlock `hcl:"tls,block"`
	DefRange       hcl.Range `hcl:",def_range"`
}

type tlsBlock struct {
	CAFile     string  `hcl:"ca_file"`
	CertFile   *string `hcl:"cert_file,optional"`
	KeyFile    *string `hcl:"key_file,optional"`
	ServerName *string `hcl:"server_name,optional"`
}

type connectBlock struct {
	Services []string              `hcl:"services"`
	CertDir  *string               `hcl:"cert_dir,optional"`
	Access   []connectServiceBlock `hcl:"service,block"`
}

// connectServiceBlock is `service "NAME" { ... }` in connect: who acts
// for NAME besides its registered sidecar, and which local users.
type connectServiceBlock struct {
	Name        string    `hcl:"name,label"`
	ProxyGroups []string  `hcl:"proxy_groups,optional"`
	Users       []string  `hcl:"users,optional"`
	UnixGroups  []string  `hcl:"unix_groups,optional"`
	DefRange    hcl.Range `hcl:",def_range"`
}

type adminBlock struct {
	Listen string `hcl:"listen"`
}

// Defaults.
const (
	DefaultSocket      = "/run/consul-xds-bridge/agent.sock"
	DefaultDataDir     = "/var/lib/consul-xds-bridge/agent"
	DefaultAdminListen = "127.0.0.1:19101"
	DefaultRelayLinger = 10 * time.Minute
)

// ParseConfig parses an agent configuration; diagnostics carry
// file:line:col. Like a policy document, a configuration over
// policy.MaxDocumentBytes is refused before it is parsed.
func ParseConfig(name string, src []byte) (*Config, hcl.Diagnostics) {
	if len(src) > policy.MaxDocumentBytes {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Configuration too large",
			Detail:   fmt.Sprintf("%d bytes is over the limit of %d; an agent configuration is a few KiB: check that it is the right file.", len(src), policy.MaxDocumentBytes),
			Subject:  &hcl.Range{Filename: name},
		}}
	}
	// hcl's parser recurses per level of nesting: a deep enough file
	// overflows the stack, which no recover catches (policy/nesting.go).
	if diags := policy.CheckNesting(name, src); diags.HasErrors() {
		return nil, diags
	}
	f, diags := hclparse.NewParser().ParseHCL(src, name)
	if diags.HasErrors() {
		return nil, diags
	}
	var raw fileSchema
	if diags = gohcl.DecodeBody(f.Body, nil, &raw); diags.HasErrors() {
		return nil, diags
	}
	host, _ := os.Hostname()
	c := &Config{
		NodeID: host, DataDir: DefaultDataDir, AllowGroups: raw.AllowGroups, AllowNodeIDs: []string{"*"},
		Socket: DefaultSocket, SocketMode: unixsock.DefaultMode, AdminListen: DefaultAdminListen, LogLevel: "info",
		Upstreams:      raw.Upstream.Addresses,
		BackoffInitial: 200 * time.Millisecond, BackoffMax: 5 * time.Second, RelayLinger: DefaultRelayLinger,
		MaxMessageSize: adsclient.DefaultMaxMessageSize,
	}
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&c.NodeID, raw.NodeID)
	set(&c.DataDir, raw.DataDir)
	set(&c.LogLevel, raw.LogLevel)
	if raw.AllowNodeIDs != nil {
		c.AllowNodeIDs = raw.AllowNodeIDs
	}
	bad := func(rng hcl.Range, summary, detail string, args ...any) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: fmt.Sprintf(detail, args...), Subject: rng.Ptr()})
	}
	whole := f.Body.MissingItemRange()
	if l := raw.Listen; l != nil {
		set(&c.Socket, l.Socket)
		set(&c.SocketGroup, l.SocketGroup)
		set(&c.TCP, l.TCP)
		if l.SocketMode != nil {
			m, err := unixsock.ParseMode(*l.SocketMode)
			if err != nil {
				bad(whole, "Invalid socket_mode", "%v", err)
			}
			c.SocketMode = m
		}
	}
	u := raw.Upstream
	set(&c.ConsulService, u.ConsulService)
	set(&c.ConsulAddress, raw.ConsulAddress)
	if (len(u.Addresses) == 0) == (c.ConsulService == "") {
		bad(u.DefRange, "Upstream needs exactly one source", "set addresses = [\"HOST:PORT\", ...] (the central bridge replicas) or consul_service = \"NAME\" (their Consul service), not both.")
	}
	if u.MaxMessageSize != nil {
		n, err := parseSize(*u.MaxMessageSize)
		switch {
		case err != nil:
			bad(u.DefRange, "Invalid max_message_size", "%v", err)
		case n < minMessageSize || n > adsclient.DefaultMaxMessageSize:
			bad(u.DefRange, "max_message_size out of range", "%q: the largest response relayed from the central bridge must be between 1MiB and 64MiB (the central bridge sends up to 64MiB, and this agent sends local proxies no more).", *u.MaxMessageSize)
		default:
			c.MaxMessageSize = n
		}
	}
	if t := u.TLS; t != nil {
		c.TLS.CAFile = t.CAFile
		set(&c.TLS.CertFile, t.CertFile)
		set(&c.TLS.KeyFile, t.KeyFile)
		set(&c.TLS.ServerName, t.ServerName)
		if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
			bad(u.DefRange, "Incomplete client certificate", "tls needs both cert_file and key_file, or neither.")
		}
	}
	if len(c.AllowGroups) == 0 {
		bad(whole, "No allowed groups", "allow_groups must list the node.cluster values (path.Match patterns) local proxies may claim, e.g. [\"web\", \"sidecar-*\"]; use [\"*\"] to allow any.")
	}
	for _, p := range append(append([]string{}, c.AllowGroups...), c.AllowNodeIDs...) {
		if _, err := path.Match(p, ""); err != nil {
			bad(whole, "Invalid pattern", "%q: %v (path.Match syntax)", p, err)
		}
	}
	if raw.Admin != nil {
		c.AdminListen = raw.Admin.Listen
	}
	if raw.Connect != nil {
		c.ConnectServices = raw.Connect.Services
		set(&c.CertDir, raw.Connect.CertDir)
		for _, svc := range c.ConnectServices {
			if !ir.QueryableServiceName(svc) {
				bad(whole, "Invalid connect service", "%q is not a Consul service name (letters, digits, '-', '_', '.')", svc)
			}
		}
		c.Leaf, diags = parseLeafAccess(raw.Connect.Access, c, diags)
		if c.CertDir != "" && !filepath.IsAbs(c.CertDir) {
			bad(whole, "Relative cert_dir", "connect cert_dir %q must be an absolute path: gRPC bootstraps name files in it.", c.CertDir)
		}
	}
	if c.NodeID == "" {
		bad(whole, "No node_id", "the host name is unknown; set node_id.")
	}
	c.Envoys, diags = parseEnvoys(raw.Envoys, c, diags)
	return c, diags
}

// allowed reports whether a local node may connect, or why not.
func (c *Config) allowed(id, cluster string) error {
	if !matchAny(c.AllowGroups, cluster) {
		return fmt.Errorf("node.cluster %q is not allowed on this host (agent allow_groups: %q)", cluster, c.AllowGroups)
	}
	return c.allowedID(id)
}

// allowedID checks a node id alone: for a Connect sidecar, keyed by a
// registration on this host rather than by the node.cluster it announces.
func (c *Config) allowedID(id string) error {
	if !matchAny(c.AllowNodeIDs, id) {
		return fmt.Errorf("node.id %q is not allowed on this host (agent allow_node_ids: %q)", id, c.AllowNodeIDs)
	}
	return nil
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}
