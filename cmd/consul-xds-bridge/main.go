// Command consul-xds-bridge watches Consul and serves Envoy configuration
// over ADS. This file holds only the CLI: flags, config loading, signals.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/term"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = ""
)

const usage = `Usage: consul-xds-bridge <command> [flags]

Commands:
  run -config FILE [-config FILE ...]   run the daemon
  agent -config FILE                    run the per-VM agent: local proxies over a Unix socket, relayed from the central bridge
  agent redirect-traffic -proxy-uid UID (-proxy-inbound-port N | -proxy-id ID) [-proxy-outbound-port N]
            [-exclude-inbound-port P] [-exclude-outbound-port P] [-exclude-outbound-cidr CIDR] [-exclude-uid UID]
            [-consul-dns-ip IP] [-consul-dns-port N] [-netns PATH] [-remove]
                                        install (or -remove) a transparent proxy's iptables rules, as consul connect redirect-traffic
  import [-consul ADDR | FILE...]       print policy HCL equivalent to Consul's L7 config entries (from Consul, or files of "consul config read")
  validate FILE...                      check configuration files; print file:line:col problems
  test [-catalog FILE] [-run REGEXP] FILE...
                                        run the route_test blocks of FILEs against the routes their policy makes
  bootstrap -node-id ID -cluster GROUP -xds HOST:PORT [-xds HOST:PORT ...] [-xds-unix PATH] [-admin-port N]
            [-tls-ca FILE [-tls-cert FILE -tls-key FILE] [-tls-server-name NAME]] [-rest [-rest-refresh D]]
            [-local-service SERVICE -region DC -zone ZONE]
                                        print an Envoy bootstrap (YAML) using ADS against the bridge
  bootstrap -grpc -node-id ID [-cluster GROUP] -xds HOST:PORT [-tls-ca FILE [-tls-cert FILE -tls-key FILE]]
            [-mesh-cert-dir DIR [-mesh-cert-refresh D]]
                                        print a proxyless gRPC client's xDS bootstrap (JSON)
  plan -config FILE [-cluster GROUP] [-admin ADDR] [-admin-token-file FILE]
                                        show what a policy would change against the running bridge (exit 0 none, 2 changes, 1 error)
  status [-admin ADDR | -config FILE] [-admin-token-file FILE]
                                        show every connected proxy and whether it is in sync
                                        (admin token: -admin-token-file, $CONSUL_XDS_BRIDGE_ADMIN_TOKEN or the config's admin.token_file)
  version                               print version information
`

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return runCmd(args[1:], stdout, stderr)
	case "agent":
		if len(args) > 1 && args[1] == "redirect-traffic" {
			return redirectTrafficCmd(args[2:], stdout, stderr)
		}
		return agentCmd(args[1:], stdout, stderr)
	case "import":
		return importCmd(args[1:], stdout, stderr)
	case "validate":
		return validateCmd(args[1:], stdout, stderr)
	case "test":
		return testCmd(args[1:], stdout, stderr)
	case "plan":
		return planCmd(args[1:], stdout, stderr)
	case "status":
		return statusCmd(args[1:], stdout, stderr)
	case "bootstrap":
		return bootstrapCmd(args[1:], stdout, stderr)
	case "version", "-version", "--version":
		printVersion(stdout)
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", stderr)
	var configs configPaths
	fs.Var(&configs, "config", "configuration `FILE` (HCL), or a directory standing for its *.hcl files in name order; repeat for several")
	if _, code, ok := parseCommand(fs, args, stdout, stderr); !ok {
		return code
	}
	if len(configs) == 0 {
		fmt.Fprintln(stderr, "run: at least one -config FILE or DIR is required (consul-xds-bridge run -h)")
		return 2
	}
	cfg, _, diags := policy.LoadFiles(configs...)
	if !diags.HasErrors() {
		diags = append(diags, policy.CheckKeyTransport(cfg.Settings.XDS, cfg.Policy)...)
	}
	if diags.HasErrors() {
		printDiagnostics(stderr, diags)
		return 1
	}
	log, err := newLogger(cfg.Settings.Log, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "run: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info().Str("version", version).Strs("config", configs).Msg("starting")
	reg := prometheus.NewRegistry()
	registerBuildInfo(reg)
	d := bridge.New(bridge.Config{ConfigFiles: configs, Settings: cfg.Settings, Policy: cfg.Policy, Logger: log, Registry: reg})
	// Under systemd (Type=notify): ready when /readyz would answer 200.
	go notifySystemd(ctx, log, d.Started(), d.NotReadyReason)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			log.Info().Msg("SIGHUP: reloading configuration")
			d.Reload()
		}
	}()
	if err := d.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error().Err(err).Msg("bridge stopped with an error")
		return 1
	}
	log.Info().Msg("stopped")
	return 0
}

func validateCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", stderr)
	catalogFile := fs.String("catalog", "", "catalog fixture (Consul API JSON) to translate the policy against (default: an empty catalog); services the policy names that it lacks are warned about")
	strict := fs.Bool("strict", false, "fail (exit 1) on any warning, for CI")
	consulAddr := fs.String("consul", "", "read the live catalog (every local service) from the Consul agent at `HOST:PORT` instead of -catalog; the config's consul block gives the datacenter and token")
	agentFlag := fs.Bool("agent", false, "the files are per-VM agent configurations (recognised without it by allow_groups or an upstream block)")
	args, code, ok := parseCommand(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, "validate: name at least one configuration file or directory (consul-xds-bridge validate -h)")
		return 2
	}
	args, err := expandConfigs(args)
	if err != nil {
		fmt.Fprintf(stderr, "validate: %v\n", err)
		return 2
	}
	// Agent configurations (-agent, or recognised by what only they
	// have) are checked as `agent -config` reads them; the rest is the
	// daemon's configuration and policy.
	var agentDiags hcl.Diagnostics
	var policyFiles []string
	for _, f := range args {
		if *agentFlag || isAgentConfig(f) {
			agentDiags = append(agentDiags, validateAgent(f)...)
		} else {
			policyFiles = append(policyFiles, f)
		}
	}
	if len(policyFiles) == 0 {
		if len(agentDiags) > 0 {
			printDiagnostics(stderr, agentDiags)
		}
		if agentDiags.HasErrors() || *strict && len(agentDiags) > 0 {
			return 1
		}
		fmt.Fprintf(stdout, "%d agent configuration file(s) valid\n", len(args))
		return 0
	}
	cat, err := readCatalogFile(*catalogFile)
	if err != nil {
		fmt.Fprintf(stderr, "validate: %v\n", err)
		return 1
	}
	cfg, _, diags := policy.LoadFiles(policyFiles...)
	diags = append(agentDiags, diags...)
	if *consulAddr != "" && !diags.HasErrors() && cfg != nil {
		if cat, err = liveCatalog(*consulAddr, cfg); err != nil {
			fmt.Fprintf(stderr, "validate: -consul: %v\n", err)
			return 1
		}
	}
	if !diags.HasErrors() && cfg != nil {
		// What `run` refuses at start: the files its settings name, and
		// keys the xDS settings would send unprotected.
		diags = append(diags, checkSettingFiles(policyFiles, cfg.Settings)...)
		diags = append(diags, policy.CheckKeyTransport(cfg.Settings.XDS, cfg.Policy)...)
	}
	var warnings []string
	if !diags.HasErrors() && cfg != nil {
		// What a reload would reject: the world the daemon would serve,
		// computed against the catalog (empty unless -catalog), and the
		// warnings the daemon would log for it.
		in := pipeline.Input{Catalog: cat, Policy: cfg.Policy, Datacenter: cfg.Settings.Consul.Datacenter}
		w, err := pipeline.Compute(in, nil)
		diags = append(diags, pipeline.Diagnose(w, err, cfg.Policy)...)
		if w != nil {
			warnings = validateWarnings(w.Warnings, cat != nil)
		}
	}
	if len(diags) > 0 {
		printDiagnostics(stderr, diags)
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if diags.HasErrors() {
		return 1
	}
	if *strict && (len(warnings) > 0 || len(diags) > 0) {
		fmt.Fprintf(stderr, "validate: %d warning(s); -strict fails on warnings\n", len(warnings)+len(diags))
		return 1
	}
	if c := cfg.Settings.Consul; c.KVPrefix != "" || c.ConfigEntries {
		// Said, not implied by "valid": a file can be valid alone and
		// clash with a KV document or an entry (a service defined in
		// both), which the bridge rejects and plan reads.
		fmt.Fprintln(stderr, "note: validate checks these files alone; the KV documents (consul.kv_prefix) and Consul config entries (consul.config_entries) the bridge merges with them were not read: consul-xds-bridge plan reads them")
	}
	fmt.Fprintf(stdout, "%d file(s) valid\n", len(args))
	return 0
}

// validateWarnings is what the daemon would log for the world validate
// computed. Without a catalog every referenced service "has no
// instances", which says nothing about the policy: those are left out
// unless a catalog (-catalog) was given, where they catch a misspelt
// service name with a suggestion.
func validateWarnings(all []string, withCatalog bool) []string {
	if withCatalog {
		return all
	}
	var out []string
	for _, w := range all {
		if !noInstancesRE.MatchString(w) {
			out = append(out, w)
		}
	}
	return out
}

var noInstancesRE = regexp.MustCompile(`^service "[^"]*" has no instances in `)

func bootstrapCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("bootstrap", stderr)
	var c xds.BootstrapConfig
	var servers stringList
	fs.StringVar(&c.NodeID, "node-id", "", "Envoy node id (unique per proxy)")
	fs.StringVar(&c.Cluster, "cluster", "", "node.cluster: the proxy group whose listeners this Envoy gets")
	fs.Var(&servers, "xds", "bridge xDS `ADDRESS`: HOST:PORT, or with a scheme (http://, https://, grpc://, grpcs://, dns:///, unix:///PATH); repeat for replicas")
	fs.StringVar(&c.XDSUnix, "xds-unix", "", "bridge xDS Unix socket `PATH` (instead of -xds)")
	fs.IntVar(&c.AdminPort, "admin-port", 19000, "Envoy admin port on 127.0.0.1")
	fs.StringVar(&c.LocalService, "local-service", "", "the service this Envoy belongs to: its endpoints become the local cluster that zone aware routing needs (policy: proxy local_service, service zone_aware)")
	fs.StringVar(&c.Region, "region", "", "this proxy's locality region: the Consul datacenter (for zone aware routing)")
	fs.StringVar(&c.ConsulNode, "consul-node", "", "for a Connect sidecar (-node-id PROXY-ID): the Consul node its registration is on, sent as node metadata consul_node")
	fs.StringVar(&c.Zone, "zone", "", "this proxy's locality zone: its Consul node's zone meta (for zone aware routing)")
	fs.StringVar(&c.TLSCAFile, "tls-ca", "", "CA `FILE` to verify the bridge's TLS certificate (written as an absolute path)")
	fs.StringVar(&c.TLSCertFile, "tls-cert", "", "client certificate `FILE` the proxy presents to the bridge (mTLS; with -tls-key and -tls-ca)")
	fs.StringVar(&c.TLSKeyFile, "tls-key", "", "private key `FILE` of -tls-cert")
	fs.StringVar(&c.TLSServerName, "tls-server-name", "", "the bridge's name in its certificate, sent as SNI and required as SAN (default: the host of the first -xds; gRPC: must be that host)")
	fs.BoolVar(&c.REST, "rest", false, "poll CDS and LDS with REST-JSON (HTTP/1.1, same bridge port) instead of ADS; endpoints, routes and secrets stay on ADS")
	fs.DurationVar(&c.RESTRefresh, "rest-refresh", time.Second, "with -rest: how often Envoy polls")
	fs.StringVar(&c.MeshCertDir, "mesh-cert-dir", "", "with -grpc: the service's Connect certificate directory the agent writes (agent connect.cert_dir/SERVICE); adds the file_watcher certificate provider \""+xds.MeshCertProvider+"\" and the xDS server listener template (proxyless mesh)")
	fs.DurationVar(&c.MeshCertRefresh, "mesh-cert-refresh", xds.DefaultMeshCertRefresh, "with -mesh-cert-dir: how often gRPC re-reads the certificate files")
	grpcClient := fs.Bool("grpc", false, "print the xDS bootstrap JSON of a proxyless gRPC client (GRPC_XDS_BOOTSTRAP) instead; -cluster is optional")
	if _, code, ok := parseCommand(fs, args, stdout, stderr); !ok {
		return code
	}
	if err := normaliseBootstrap(&c, servers); err != nil {
		fmt.Fprintf(stderr, "bootstrap: %v\n", err)
		return 2
	}
	if c.MeshCertDir != "" && !*grpcClient {
		fmt.Fprintln(stderr, "bootstrap: -mesh-cert-dir is for gRPC (-grpc); Envoy takes its mesh certificates over SDS")
		return 2
	}
	if *grpcClient {
		if c.REST {
			fmt.Fprintln(stderr, "bootstrap: -rest is for Envoy; gRPC clients use ADS")
			return 2
		}
		js, err := xds.GRPCBootstrap(c)
		if err != nil {
			fmt.Fprintf(stderr, "bootstrap: %v\n", err)
			return 2
		}
		stdout.Write(js)
		return 0
	}
	b, err := xds.Bootstrap(c)
	if err != nil {
		fmt.Fprintf(stderr, "bootstrap: %v\n", err)
		return 2
	}
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(b)
	if err != nil {
		fmt.Fprintf(stderr, "bootstrap: %v\n", err)
		return 1
	}
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		fmt.Fprintf(stderr, "bootstrap: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "# Envoy bootstrap for node %q in proxy group %q, generated by consul-xds-bridge %s.\n", c.NodeID, c.Cluster, version)
	stdout.Write(y)
	return 0
}

// printDiagnostics prints each diagnostic as `file:line:col: message`,
// then the source line it points at with a caret under the range, as
// compilers do, when the file can be read (a KV key's position has no
// file here).
func printDiagnostics(w io.Writer, diags hcl.Diagnostics) {
	sources := map[string][]string{}
	for i, line := range policy.FormatDiagnostics(diags) {
		fmt.Fprintln(w, line)
		if snippet := sourceSnippet(diags[i].Subject, sources); snippet != "" {
			fmt.Fprint(w, snippet)
		}
	}
}

// sourceSnippet is the line rng starts on and a caret line under it.
func sourceSnippet(rng *hcl.Range, cache map[string][]string) string {
	if rng == nil || rng.Start.Line == 0 || rng.Filename == "" {
		return ""
	}
	lines, ok := cache[rng.Filename]
	if !ok {
		if b, err := readSettingFile(rng.Filename); err == nil {
			lines = strings.Split(string(b), "\n")
		}
		cache[rng.Filename] = lines
	}
	if rng.Start.Line > len(lines) {
		return ""
	}
	src := strings.TrimRight(lines[rng.Start.Line-1], "\r")
	col := max(rng.Start.Column, 1)
	if col > len(src)+1 {
		return ""
	}
	width := 1
	if rng.End.Line == rng.Start.Line && rng.End.Column > col {
		width = min(rng.End.Column-col, len(src)+1-col)
	}
	// Tabs keep their width in the caret line, so the caret lines up.
	pad := []rune(src[:col-1])
	for i, r := range pad {
		if r != '\t' {
			pad[i] = ' '
		}
	}
	return fmt.Sprintf("  %4d | %s\n       | %s%s\n", rng.Start.Line, src, string(pad), strings.Repeat("^", max(width, 1)))
}

// logTimeFormat is RFC 3339 with milliseconds: a change's events (Consul's
// answer, the build, the pushes) fall within one second, and an operator
// lining up the bridge's log with Envoy's (which has milliseconds) needs
// their order.
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

func newLogger(s policy.LogSettings, w io.Writer) (zerolog.Logger, error) {
	zerolog.TimeFieldFormat = logTimeFormat
	level, err := zerolog.ParseLevel(s.Level)
	if err != nil {
		return zerolog.Logger{}, fmt.Errorf("log level %q: %w", s.Level, err)
	}
	// Whether colours suit is a question about w itself: the redacting
	// wrapper below is no *os.File, so asking it would always say no.
	color := colorful(w)
	// Whatever a log line quotes of user input, a private key or token
	// pasted there never reaches the log.
	w = policy.NewRedactingWriter(w)
	// Durations print with their unit ("build":"8.939ms"), not as a bare
	// number of milliseconds.
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
	if s.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: logTimeFormat, NoColor: !color}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

func printVersion(w io.Writer) {
	ver, rev, gcp := buildInfo()
	fmt.Fprintf(w, "consul-xds-bridge %s\ncommit: %s\ngo-control-plane: %s\n", ver, rev, gcp)
}

// colorful says whether console logs to w may use ANSI colours: only on
// a terminal, and not when $NO_COLOR is set to anything (no-color.org).
// A file or journald gets plain text.
func colorful(w io.Writer) bool {
	if _, set := os.LookupEnv("NO_COLOR"); set {
		return false
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// liveCatalog reads the catalog validate checks against from the Consul
// agent at addr: every local service (so a misspelt name gets "did you
// mean"), and the mesh when the policy uses it.
func liveCatalog(addr string, cfg *policy.Config) (*consul.Catalog, error) {
	s := cfg.Settings.Consul
	client, err := consul.NewClient(consul.ClientConfig{Address: addr, Datacenter: s.Datacenter, TokenFile: s.TokenFile})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	live := *cfg
	live.Settings.Consul.Address = addr
	return readConsulWorld(ctx, client, &live, true)
}
