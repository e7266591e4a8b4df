// Package policy reads the bridge's HCL configuration: daemon settings and
// routing policy, from files and (later) Consul KV documents. Every problem is
// an hcl.Diagnostic with a source range so it prints as file:line:col. It
// knows nothing about Consul's API or Envoy.
package policy

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/unixsock"
	"github.com/hashicorp/hcl/v2"
)

// Settings are the daemon's own settings (everything but routing policy),
// with defaults applied.
type Settings struct {
	Consul ConsulSettings
	XDS    XDSSettings
	Admin  AdminSettings
	Log    LogSettings
}

// ConsulSettings is the `consul` block.
type ConsulSettings struct {
	// Address is host:port of the agent's HTTP API; "" keeps CONSUL_HTTP_ADDR
	// or Consul's default.
	Address    string
	Datacenter string
	// TokenFile names a file holding the ACL token (never the token itself).
	TokenFile string
	Stale     bool
	KVPrefix  string
	// StateDir, if set, is where the last accepted KV policy documents are
	// kept (kv-policy.json), so a bridge started while a KV document is
	// broken serves that document's last accepted version.
	StateDir string
	// WaitTime is how long one blocking query may block.
	WaitTime time.Duration
	// StaleAfter is how long Consul may be unreachable before /readyz
	// turns 503; xDS keeps serving the last good state regardless.
	StaleAfter time.Duration
	// ReconnectHold is how long, after Consul answers again following an
	// outage, health downgrades and removals are held back (see docs/operations/failure-behaviour.md); 0 disables it.
	ReconnectHold time.Duration
	// ReconnectHoldAfter is how long a datacenter's Consul must have given
	// no answer for its return to arm ReconnectHold: a single failed
	// request retried at once is not an outage.
	ReconnectHoldAfter time.Duration
	// MaxQueries bounds the Consul requests in flight at once (each
	// watched service holds one blocking query); see docs/scaling.md.
	MaxQueries int
	// UseCache reads service health through the agent's cache (?cached),
	// streaming-backed on client agents; see docs/scaling.md.
	UseCache bool
	// ConfigEntries reads Consul's L7 config entries (service-defaults,
	// -resolver, -splitter, -router, ingress-gateway) as policy documents
	// (package configentry).
	ConfigEntries bool
	// Register, if set, registers the bridge in Consul as a service whose
	// check passes while the bridge is ready, so per-VM agents find the
	// replicas (agent upstream consul_service).
	Register *RegisterSettings
}

// RegisterSettings is the consul.register block.
type RegisterSettings struct {
	// Name is the service name (default "consul-xds-bridge"); Address is
	// what agents dial (default: the xds listen host, which must then not
	// be a loopback or wildcard address for remote agents); Tags are
	// passed through.
	Name, Address string
	Tags          []string
}

// DefaultRegisterName is the service name a bridge registers as.
const DefaultRegisterName = "consul-xds-bridge"

// XDSSettings is the `xds` block.
type XDSSettings struct {
	// Listen is host:port, or unix:///path for a Unix socket.
	Listen string
	// SocketMode and SocketGroup are the Unix socket's permission bits
	// (default 0660) and group (name or gid; default the process's).
	SocketMode  os.FileMode
	SocketGroup string
	// TLS serves xDS over TLS when CertFile is set; with ClientCAFile,
	// clients must present a certificate signed by it (mTLS).
	TLS TLSFiles
	// AuthorizeNodes checks the node a client claims against its client
	// certificate (see docs/operations/securing-the-xds-port.md); it needs mTLS.
	AuthorizeNodes bool
	// InsecureServeKeys lets a policy serve private keys (central mesh
	// leaves, edge and upstream TLS keys) over a connection that is
	// neither mTLS with AuthorizeNodes nor a closed Unix socket
	// (CheckKeyTransport). Lab only: it is warned about at every start.
	InsecureServeKeys bool
	// MaxInitialSyncs bounds how many proxies receive their initial state
	// at once; 0 means no bound.
	MaxInitialSyncs int
	// DebounceHoldOff is how long a change waits for more before a push;
	// DebounceMaxDelay caps that wait during a continuous stream of
	// changes.
	DebounceHoldOff, DebounceMaxDelay time.Duration
	// DebounceAdaptive lets the window between builds follow the rate of
	// changes, zero while they are calm (bridge/debounce.go),
	// DebounceHoldOff its upper bound; false keeps it at DebounceHoldOff.
	DebounceAdaptive bool
	// CollectWhenIdle lets the bridge start a garbage collection when it
	// is idle, no change waits for its build, and two more fan-outs like
	// the last would reach the point Go may start one (bridge/idlegc.go),
	// so that fewer fan-outs meet one.
	CollectWhenIdle bool
}

// TLSFiles names PEM files; they are re-read when they change on disk.
type TLSFiles struct {
	CertFile     string
	KeyFile      string
	ClientCAFile string
}

// AdminSettings is the `admin` block.
type AdminSettings struct {
	Listen string
	// TokenFile, if set, holds the bearer token every admin request
	// except /healthz, /readyz, /metrics and the console's static files
	// must carry; unset, the bridge generates one (AdminTokenPath).
	TokenFile string
	// Hosts are the DNS names a request's Host may carry besides IP
	// addresses and localhost (a name the admin API is reached by); any
	// other name is refused, which defeats DNS rebinding.
	Hosts []string
	// Pprof serves /debug/pprof/; off by default because profiles reveal
	// internals and cost CPU.
	Pprof bool
}

// LogSettings is the `log` block.
type LogSettings struct {
	Level  string
	Format string
}

// Defaults for settings a file leaves out.
const (
	DefaultXDSListen   = "127.0.0.1:18000"
	DefaultAdminListen = "127.0.0.1:19100"
	DefaultWaitTime    = 60 * time.Second
	DefaultStaleAfter  = 2 * time.Minute
	// DefaultReconnectHold covers the first run of checks with the common
	// 10s interval; measured by TestConsulServerRestart.
	DefaultReconnectHold = 15 * time.Second
	// DefaultReconnectHoldAfter is above the first retries of a failed
	// request (backoff from 250 ms) and below an agent restart (seconds).
	DefaultReconnectHoldAfter = 2 * time.Second
	// DefaultMaxQueries leaves room under Consul's default
	// limits.http_max_conns_per_client (200) for other local clients.
	DefaultMaxQueries = 128
	// DefaultMaxInitialSyncs keeps the server busy while bounding the
	// memory of initial states queued at once (bench/README.md, S6).
	DefaultMaxInitialSyncs = 100
	DefaultDebounceHoldOff = 100 * time.Millisecond
	DefaultDebounceMax     = time.Second
)

// DefaultSettings are what an empty configuration means.
func DefaultSettings() Settings {
	return Settings{
		Consul: ConsulSettings{Stale: true, WaitTime: DefaultWaitTime, StaleAfter: DefaultStaleAfter, ReconnectHold: DefaultReconnectHold, ReconnectHoldAfter: DefaultReconnectHoldAfter, MaxQueries: DefaultMaxQueries, UseCache: true},
		XDS: XDSSettings{Listen: DefaultXDSListen, MaxInitialSyncs: DefaultMaxInitialSyncs, DebounceAdaptive: true, CollectWhenIdle: true,
			DebounceHoldOff: DefaultDebounceHoldOff, DebounceMaxDelay: DefaultDebounceMax},
		Admin: AdminSettings{Listen: DefaultAdminListen},
		Log:   LogSettings{Level: "info", Format: "json"},
	}
}

// The raw blocks as written; hcl.Expression fields are converted by hand so
// errors point at the attribute's value.
type consulBlock struct {
	Address       *string        `hcl:"address,optional"`
	Datacenter    *string        `hcl:"datacenter,optional"`
	TokenFile     *string        `hcl:"token_file,optional"`
	Stale         *bool          `hcl:"stale,optional"`
	KVPrefix      *string        `hcl:"kv_prefix,optional"`
	StateDir      *string        `hcl:"state_dir,optional"`
	WaitTime      hcl.Expression `hcl:"wait_time,optional"`
	StaleAfter    hcl.Expression `hcl:"stale_after,optional"`
	ReconnectHold hcl.Expression `hcl:"reconnect_hold,optional"`
	HoldAfter     hcl.Expression `hcl:"reconnect_hold_after,optional"`
	MaxQueries    *int           `hcl:"max_queries,optional"`
	UseCache      *bool          `hcl:"use_cache,optional"`
	Register      *registerBlock `hcl:"register,block"`
	ConfigEntries *bool          `hcl:"config_entries,optional"`
	Body          hcl.Body       `hcl:",body"`
	DefRange      hcl.Range      `hcl:",def_range"`
}

type registerBlock struct {
	Name    *string  `hcl:"name,optional"`
	Address *string  `hcl:"address,optional"`
	Tags    []string `hcl:"tags,optional"`
}

type xdsBlock struct {
	Listen         *string        `hcl:"listen,optional"`
	TLS            *tlsFiles      `hcl:"tls,block"`
	AuthorizeNodes *bool          `hcl:"authorize_nodes,optional"`
	InsecureKeys   *bool          `hcl:"insecure_serve_keys,optional"`
	MaxInitial     *int           `hcl:"max_initial_syncs,optional"`
	HoldOff        hcl.Expression `hcl:"debounce_hold_off,optional"`
	MaxDelay       hcl.Expression `hcl:"debounce_max_delay,optional"`
	SocketMode     *string        `hcl:"socket_mode,optional"`
	Adaptive       *bool          `hcl:"debounce_adaptive,optional"`
	IdleGC         *bool          `hcl:"collect_when_idle,optional"`
	SocketGroup    *string        `hcl:"socket_group,optional"`
	Body           hcl.Body       `hcl:",body"`
	DefRange       hcl.Range      `hcl:",def_range"`
}

type tlsFiles struct {
	CertFile     *string   `hcl:"cert_file,optional"`
	KeyFile      *string   `hcl:"key_file,optional"`
	ClientCAFile *string   `hcl:"client_ca_file,optional"`
	DefRange     hcl.Range `hcl:",def_range"`
}

type adminBlock struct {
	Listen    *string   `hcl:"listen,optional"`
	TokenFile *string   `hcl:"token_file,optional"`
	Hosts     []string  `hcl:"hosts,optional"`
	Pprof     *bool     `hcl:"pprof,optional"`
	Body      hcl.Body  `hcl:",body"`
	DefRange  hcl.Range `hcl:",def_range"`
}

type logBlock struct {
	Level    *string   `hcl:"level,optional"`
	Format   *string   `hcl:"format,optional"`
	Body     hcl.Body  `hcl:",body"`
	DefRange hcl.Range `hcl:",def_range"`
}

func (b *consulBlock) apply(s *ConsulSettings) hcl.Diagnostics {
	set(&s.Address, b.Address)
	set(&s.Datacenter, b.Datacenter)
	set(&s.TokenFile, b.TokenFile)
	set(&s.Stale, b.Stale)
	set(&s.KVPrefix, b.KVPrefix)
	set(&s.StateDir, b.StateDir)
	diags := durationAttr(b.WaitTime, &s.WaitTime)
	diags = append(diags, durationAttr(b.StaleAfter, &s.StaleAfter)...)
	diags = append(diags, durationAttrZero(b.ReconnectHold, &s.ReconnectHold)...)
	if s.ReconnectHold < 0 {
		s.ReconnectHold = 0 // "0s": off
	}
	diags = append(diags, durationAttr(b.HoldAfter, &s.ReconnectHoldAfter)...)
	set(&s.MaxQueries, b.MaxQueries)
	set(&s.UseCache, b.UseCache)
	set(&s.ConfigEntries, b.ConfigEntries)
	if r := b.Register; r != nil {
		s.Register = &RegisterSettings{Name: DefaultRegisterName, Tags: r.Tags}
		set(&s.Register.Name, r.Name)
		set(&s.Register.Address, r.Address)
	}
	if s.MaxQueries < 2 || s.MaxQueries > 1000 {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid max_queries",
			Detail:   fmt.Sprintf("max_queries is how many Consul requests may be in flight at once; %d is outside 2..1000. Keep it below the agent's limits.http_max_conns_per_client (200 by default) minus what other local clients use.", s.MaxQueries),
			Subject:  valueRange(b.Body, "max_queries", b.DefRange).Ptr(),
		})
	}
	if s.WaitTime > 10*time.Minute {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid wait_time",
			Detail:   fmt.Sprintf("Consul caps blocking queries at 10m; %s is longer. Use a value between 1s and 10m.", s.WaitTime),
			Subject:  b.WaitTime.Range().Ptr(),
		})
	}
	return diags
}

func (b *xdsBlock) apply(s *XDSSettings) hcl.Diagnostics {
	set(&s.Listen, b.Listen)
	set(&s.AuthorizeNodes, b.AuthorizeNodes)
	set(&s.InsecureServeKeys, b.InsecureKeys)
	set(&s.MaxInitialSyncs, b.MaxInitial)
	diags := checkListen("xds", s.Listen, valueRange(b.Body, "listen", b.DefRange))
	set(&s.SocketGroup, b.SocketGroup)
	set(&s.DebounceAdaptive, b.Adaptive)
	set(&s.CollectWhenIdle, b.IdleGC)
	if b.SocketMode != nil {
		m, err := unixsock.ParseMode(*b.SocketMode)
		if err != nil {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid socket_mode", Detail: err.Error(),
				Subject: valueRange(b.Body, "socket_mode", b.DefRange).Ptr()})
		}
		s.SocketMode = m
	}
	if s.MaxInitialSyncs < 0 {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid max_initial_syncs",
			Detail:   "max_initial_syncs is how many proxies may receive their initial state at once; use a positive number, or 0 for no bound.",
			Subject:  valueRange(b.Body, "max_initial_syncs", b.DefRange).Ptr(),
		})
	}
	diags = append(diags, durationAttr(b.HoldOff, &s.DebounceHoldOff)...)
	diags = append(diags, durationAttr(b.MaxDelay, &s.DebounceMaxDelay)...)
	if s.DebounceMaxDelay < s.DebounceHoldOff {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "debounce_max_delay shorter than debounce_hold_off",
			Detail:   fmt.Sprintf("debounce_max_delay (%s) caps the wait during a continuous stream of changes, so it must be at least debounce_hold_off (%s).", s.DebounceMaxDelay, s.DebounceHoldOff),
			Subject:  valueRange(b.Body, "debounce_max_delay", b.DefRange).Ptr(),
		})
	}
	if t := b.TLS; t != nil {
		set(&s.TLS.CertFile, t.CertFile)
		set(&s.TLS.KeyFile, t.KeyFile)
		set(&s.TLS.ClientCAFile, t.ClientCAFile)
		if s.TLS.CertFile == "" || s.TLS.KeyFile == "" {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Incomplete xDS TLS",
				Detail:   "xds tls needs cert_file and key_file (the server certificate); add client_ca_file to require client certificates.",
				Subject:  t.DefRange.Ptr(),
			})
		}
	}
	if s.AuthorizeNodes && s.TLS.ClientCAFile == "" {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "authorize_nodes without client certificates",
			Detail:   "authorize_nodes checks the node a proxy claims against its client certificate; set xds { tls { client_ca_file = ... } } so clients must present one.",
			Subject:  valueRange(b.Body, "authorize_nodes", b.DefRange).Ptr(),
		})
	}
	return diags
}

func (b *adminBlock) apply(s *AdminSettings) hcl.Diagnostics {
	set(&s.Listen, b.Listen)
	set(&s.TokenFile, b.TokenFile)
	if b.Hosts != nil {
		s.Hosts = b.Hosts
	}
	set(&s.Pprof, b.Pprof)
	return checkListen("admin", s.Listen, valueRange(b.Body, "listen", b.DefRange))
}

func (b *logBlock) apply(s *LogSettings) hcl.Diagnostics {
	set(&s.Level, b.Level)
	set(&s.Format, b.Format)
	var diags hcl.Diagnostics
	switch s.Level {
	case "trace", "debug", "info", "warn", "error":
	default:
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid log level",
			Detail:   fmt.Sprintf("level = %q is not one of trace, debug, info, warn, error.", s.Level),
			Subject:  valueRange(b.Body, "level", b.DefRange).Ptr(),
		})
	}
	switch s.Format {
	case "json", "console":
	default:
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid log format",
			Detail:   fmt.Sprintf("format = %q is not one of json, console.", s.Format),
			Subject:  valueRange(b.Body, "format", b.DefRange).Ptr(),
		})
	}
	return diags
}

func checkListen(block, addr string, rng hcl.Range) hcl.Diagnostics {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok && path != "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Invalid listen address",
			Detail:   fmt.Sprintf("%s listen = %q: %v. Use host:port (e.g. 127.0.0.1:18000) or unix:///path.", block, addr, err),
			Subject:  rng.Ptr(),
		}}
	}
	return nil
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}
