package agent

import (
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// EnvoyConfig is one `envoy "NAME" { ... }` block: a local Envoy the
// agent runs (envoy.go), as Istio's pilot-agent runs its proxy.
type EnvoyConfig struct {
	// Name labels the block: the bootstrap's file name, log lines, metrics.
	Name string
	// Binary is Envoy's executable (absolute path).
	Binary string
	// NodeID and Cluster are node.id and node.cluster in the bootstrap;
	// SidecarFor, instead of Cluster, makes it the Connect sidecar of a
	// local service (node.cluster = the service, node.id default
	// SERVICE-sidecar-proxy, Consul's default sidecar id).
	NodeID, Cluster, SidecarFor string
	// AdminPort is Envoy's admin listener, always on 127.0.0.1.
	AdminPort int
	// BaseID is --base-id (default: AdminPort): Envoys on one host need
	// distinct ones for their hot restart shared memory and sockets.
	BaseID int
	// Concurrency is --concurrency, 0 for Envoy's default (one worker per
	// hardware thread).
	Concurrency int
	// DrainTime is --drain-time-s and how long a stop drains;
	// ParentShutdownTime is --parent-shutdown-time-s (after it, a hot
	// restart's new epoch tells the old one to exit). Whole seconds.
	DrainTime, ParentShutdownTime time.Duration
	// DrainStrategy is --drain-strategy: "immediate" (default, as Istio)
	// or "gradual".
	DrainStrategy string
	// Args are more arguments for Envoy (log level, component log
	// levels...); the flags the agent owns are refused.
	Args []string
	// DeclRange is the block's position (for diagnostics; not compared
	// when a reload decides whether the block changed).
	DeclRange hcl.Range
}

// sameEnvoy reports whether two configs of a block run the same Envoy.
func sameEnvoy(a, b EnvoyConfig) bool {
	a.DeclRange, b.DeclRange = hcl.Range{}, hcl.Range{}
	return reflect.DeepEqual(a, b)
}

// Envoy block defaults.
const (
	DefaultEnvoyBinary    = "/usr/local/bin/envoy"
	DefaultEnvoyAdminPort = 19000
	DefaultEnvoyDrainTime = 30 * time.Second
	// DefaultParentShutdownExtra is how much longer than drain_time the
	// parent epoch lives by default.
	DefaultParentShutdownExtra = 15 * time.Second
)

type envoyBlock struct {
	Name               string    `hcl:"name,label"`
	Binary             *string   `hcl:"binary,optional"`
	NodeID             *string   `hcl:"node_id,optional"`
	Cluster            *string   `hcl:"cluster,optional"`
	SidecarFor         *string   `hcl:"sidecar_for,optional"`
	AdminPort          *int      `hcl:"admin_port,optional"`
	BaseID             *int      `hcl:"base_id,optional"`
	Concurrency        *int      `hcl:"concurrency,optional"`
	DrainTime          *string   `hcl:"drain_time,optional"`
	ParentShutdownTime *string   `hcl:"parent_shutdown_time,optional"`
	DrainStrategy      *string   `hcl:"drain_strategy,optional"`
	Args               []string  `hcl:"args,optional"`
	DefRange           hcl.Range `hcl:",def_range"`
}

var envoyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// ownedEnvoyFlags are Envoy's flags the agent sets itself: the bootstrap
// (which keeps the admin listener on loopback; --config-yaml could move
// it), hot restart (epochs, base id, its sockets) and draining.
var ownedEnvoyFlags = []string{
	"-c", "--config-path", "--config-yaml", "--config-proto", "--restart-epoch", "--base-id", "--use-dynamic-base-id",
	"--base-id-path", "--drain-time-s", "--parent-shutdown-time-s", "--drain-strategy", "--concurrency",
	"--disable-hot-restart", "--socket-path", "--socket-mode", "--mode", "--service-node", "--service-cluster",
}

// parseEnvoys decodes the envoy blocks, checked against the rest of c.
func parseEnvoys(blocks []envoyBlock, c *Config, diags hcl.Diagnostics) ([]EnvoyConfig, hcl.Diagnostics) {
	bad := func(rng hcl.Range, summary, detail string, args ...any) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: fmt.Sprintf(detail, args...), Subject: rng.Ptr()})
	}
	seen := map[string]hcl.Range{}
	ports, bases := map[int]string{}, map[int]string{}
	_, agentPort, _ := net.SplitHostPort(c.AdminListen)
	var out []EnvoyConfig
	for _, b := range blocks {
		rng := b.DefRange
		if prev, ok := seen[b.Name]; ok {
			bad(rng, "Duplicate envoy block", "envoy %q is already defined (previous definition at %s).", b.Name, prev)
			continue
		}
		seen[b.Name] = rng
		if !envoyNameRE.MatchString(b.Name) {
			bad(rng, "Invalid envoy name", "%q: letters, digits, '.', '_' and '-' (it names the bootstrap file).", b.Name)
		}
		e := EnvoyConfig{Name: b.Name, Binary: DefaultEnvoyBinary, AdminPort: DefaultEnvoyAdminPort, DrainTime: DefaultEnvoyDrainTime,
			DrainStrategy: "immediate", Args: b.Args, DeclRange: rng}
		str := func(dst *string, v *string) {
			if v != nil {
				*dst = *v
			}
		}
		str(&e.Binary, b.Binary)
		str(&e.Cluster, b.Cluster)
		str(&e.SidecarFor, b.SidecarFor)
		str(&e.DrainStrategy, b.DrainStrategy)
		if !filepath.IsAbs(e.Binary) {
			bad(rng, "Relative envoy binary", "binary = %q must be an absolute path.", e.Binary)
		}
		switch {
		case (e.Cluster == "") == (e.SidecarFor == ""):
			bad(rng, "Envoy needs exactly one role", "set cluster = \"GROUP\" (its node.cluster, a proxy group) or sidecar_for = \"SERVICE\" (the Connect sidecar of a local service), not both.")
		case e.Cluster != "" && !matchAny(c.AllowGroups, e.Cluster):
			bad(rng, "Envoy's group is not allowed", "cluster = %q is not matched by allow_groups %q: the agent would refuse its own Envoy. Add it to allow_groups.", e.Cluster, c.AllowGroups)
		case e.SidecarFor != "" && !slices.Contains(c.ConnectServices, e.SidecarFor):
			bad(rng, "Sidecar for a service the agent does not serve", "sidecar_for = %q needs %q in connect.services: the agent knows sidecars, and serves their certificates, only for those.", e.SidecarFor, e.SidecarFor)
		}
		e.NodeID = c.NodeID + "-" + b.Name
		if e.SidecarFor != "" {
			e.NodeID = e.SidecarFor + "-sidecar-proxy"
			e.Cluster = e.SidecarFor
		}
		str(&e.NodeID, b.NodeID)
		if err := c.allowedID(e.NodeID); err != nil {
			bad(rng, "Envoy's node id is not allowed", "%v: the agent would refuse its own Envoy.", err)
		}
		if b.AdminPort != nil {
			e.AdminPort = *b.AdminPort
		}
		e.BaseID = e.AdminPort
		if b.BaseID != nil {
			e.BaseID = *b.BaseID
		}
		if b.Concurrency != nil {
			e.Concurrency = *b.Concurrency
		}
		switch {
		case e.AdminPort < 1 || e.AdminPort > 65535:
			bad(rng, "Invalid admin_port", "admin_port = %d: a TCP port on 127.0.0.1 (1-65535).", e.AdminPort)
		case ports[e.AdminPort] != "":
			bad(rng, "Duplicate admin_port", "admin_port %d is also envoy %q's.", e.AdminPort, ports[e.AdminPort])
		case strconv.Itoa(e.AdminPort) == agentPort:
			bad(rng, "admin_port is the agent's", "admin_port %d is the agent's own admin listener (%s).", e.AdminPort, c.AdminListen)
		}
		ports[e.AdminPort] = b.Name
		if e.BaseID < 0 || bases[e.BaseID] != "" {
			bad(rng, "Invalid base_id", "base_id %d must be >= 0 and differ from every other envoy's (%q has it): Envoys sharing one collide in hot restart.", e.BaseID, bases[e.BaseID])
		}
		bases[e.BaseID] = b.Name
		if e.Concurrency < 0 || e.Concurrency > 1024 {
			bad(rng, "Invalid concurrency", "concurrency = %d: 0 (Envoy's default) to 1024 worker threads.", e.Concurrency)
		}
		if e.DrainStrategy != "immediate" && e.DrainStrategy != "gradual" {
			bad(rng, "Invalid drain_strategy", "drain_strategy = %q: \"immediate\" or \"gradual\" (Envoy's --drain-strategy).", e.DrainStrategy)
		}
		secs := func(name string, v *string, dst *time.Duration) {
			if v == nil {
				return
			}
			d, err := time.ParseDuration(*v)
			if err != nil || d < 0 || d%time.Second != 0 {
				bad(rng, "Invalid "+name, "%s = %q: whole seconds (\"30s\", \"1m\"), as Envoy's flag takes seconds.", name, *v)
				return
			}
			*dst = d
		}
		secs("drain_time", b.DrainTime, &e.DrainTime)
		e.ParentShutdownTime = e.DrainTime + DefaultParentShutdownExtra
		secs("parent_shutdown_time", b.ParentShutdownTime, &e.ParentShutdownTime)
		if e.ParentShutdownTime <= e.DrainTime {
			bad(rng, "parent_shutdown_time not after drain_time", "parent_shutdown_time (%s) must be longer than drain_time (%s): the old epoch drains, then is shut down.", e.ParentShutdownTime, e.DrainTime)
		}
		for _, arg := range e.Args {
			// Envoy's parser (TCLAP, delimiter ' ') splits one argument
			// at its first space: "--config-yaml admin: ..." sets the
			// flag as "--config-yaml" and the next argument would. '='
			// is refused by Envoy, and cut here all the same.
			flag := arg
			if i := strings.IndexAny(arg, " ="); i >= 0 {
				flag = arg[:i]
			}
			if slices.Contains(ownedEnvoyFlags, flag) {
				bad(rng, "Envoy flag set by the agent", "args may not set %s: the agent sets the bootstrap, hot restart and drain flags itself (use this block's settings).", flag)
			}
		}
		if hr := hotRestartSocket(filepath.Join(c.DataDir, "envoy", e.Name+".yaml")); len(hr) > maxHotRestartSocket {
			bad(rng, "data_dir too long for Envoy's hot restart socket", "the hot restart socket %s would be %d bytes; Unix socket paths hold 107 and Envoy appends up to 18: use a shorter data_dir or envoy name (at most %d bytes in all).", hr, len(hr), maxHotRestartSocket)
		}
		out = append(out, e)
	}
	return out, diags
}
