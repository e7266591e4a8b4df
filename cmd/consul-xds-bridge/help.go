package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// commandHelp is what `consul-xds-bridge NAME -h` prints above the flags.
type commandHelp struct {
	synopsis, about string
}

var commands = map[string]commandHelp{
	"run": {"run -config FILE|DIR [-config FILE|DIR ...]",
		"Run the daemon: watch Consul, build the policy's world and serve it over xDS,\n" +
			"with the admin API and console. A DIR stands for its *.hcl files in name order.\n" +
			"SIGHUP re-reads the files; SIGTERM stops it gracefully."},
	"agent": {"agent -config FILE",
		"Run the per-VM agent: local proxies connect to its Unix socket; it relays the\n" +
			"central bridges and keeps the last good config of each proxy group on disk."},
	"import": {"import [-consul ADDR] [-mesh] [FILE...]",
		"Print policy HCL equivalent to Consul's L7 config entries, read from Consul or\n" +
			"from FILEs that `consul config read` wrote."},
	"validate": {"validate [-strict] [-catalog FILE] [-agent] FILE|DIR...",
		"Check configuration files as `run` (or `agent`) would load them and translate\n" +
			"the policy as a reload would. Exit 0 if valid; else print file:line:col\n" +
			"problems and exit 1."},
	"test": {"test [-catalog FILE] [-run REGEXP] FILE...",
		"Run the route_test blocks of FILEs against the routes their policy makes\n" +
			"(no Consul needed). Exit 1 when a test fails."},
	"plan": {"plan -config FILE|DIR [-cluster GROUP] [-node ID] [-admin ADDR] [-admin-token-file FILE] [-kv-key KEY FILE]",
		"Show what a policy would change against the running bridge.\n" +
			"Exit 0 with no changes, 2 with changes, 1 on an error."},
	"status": {"status [-admin ADDR | -config FILE] [-admin-token-file FILE]",
		"Show every connected proxy and whether it is in sync. The admin token comes\n" +
			"from -admin-token-file, $CONSUL_XDS_BRIDGE_ADMIN_TOKEN or the config's\n" +
			"admin.token_file."},
	"agent redirect-traffic": {"agent redirect-traffic -proxy-uid UID (-proxy-id ID | -proxy-inbound-port N) [flags]",
		"Install (or with -remove, remove) the iptables nat rules that send this VM's\n" +
			"traffic through its transparent sidecar, as Consul's `consul connect\n" +
			"redirect-traffic` does (the same chains and flags). Needs root."},
	"bootstrap": {"bootstrap -node-id ID -cluster GROUP -xds [SCHEME://]HOST:PORT [flags]\n" +
		"       consul-xds-bridge bootstrap -grpc -node-id ID -xds [SCHEME://]HOST:PORT [flags]",
		"Print an Envoy bootstrap (YAML) that uses ADS against the bridge, or with -grpc\n" +
			"a proxyless gRPC client's xDS bootstrap (JSON). File paths are written\n" +
			"absolute: Envoy under systemd runs in /."},
}

// newFlagSet is the flag set of a subcommand: errors go to stderr, the
// help (parseCommand) to stdout on -h.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // parseCommand prints it, to the right place
	return fs
}

// parseCommand parses a subcommand's flags wherever they stand
// (parseAnywhere). On -h it prints the command's help to stdout and
// returns exit code 0; on a bad flag, flag's message and the help go to
// stderr, exit code 2. ok is false in both cases.
func parseCommand(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (rest []string, code int, ok bool) {
	rest, err := parseAnywhere(fs, args)
	if err == nil {
		return rest, 0, true
	}
	if errors.Is(err, flag.ErrHelp) {
		printCommandHelp(fs, stdout)
		return nil, 0, false
	}
	printCommandHelp(fs, stderr)
	return nil, 2, false
}

// printCommandHelp prints the synopsis, what the command does and every
// flag with its default.
func printCommandHelp(fs *flag.FlagSet, w io.Writer) {
	h, ok := commands[fs.Name()]
	if !ok {
		h.synopsis = fs.Name() + " [flags]"
	}
	fmt.Fprintf(w, "Usage: consul-xds-bridge %s\n\n", h.synopsis)
	if h.about != "" {
		fmt.Fprintf(w, "%s\n\n", h.about)
	}
	fmt.Fprintln(w, "Flags:")
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}
