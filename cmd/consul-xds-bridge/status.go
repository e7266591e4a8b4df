package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

func statusCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("status", stderr)
	var af adminFlags
	af.register(fs)
	var configs configPaths
	fs.Var(&configs, "config", "configuration `FILE` or directory to take the admin address from")
	if _, code, ok := parseCommand(fs, args, stdout, stderr); !ok {
		return code
	}
	settings, err := adminSettings(configs)
	if err != nil {
		fmt.Fprintf(stderr, "status: %v\n", err)
		return 1
	}
	admin, err := newAdminClient(af, settings)
	if err != nil {
		fmt.Fprintf(stderr, "status: %v\n", err)
		return 1
	}
	var proxies []serve.ProxyStatus
	if err := admin.getJSON("/v1/proxies", &proxies); err != nil {
		fmt.Fprintf(stderr, "status: %v\n", err)
		return 1
	}
	printProxies(stdout, proxies, time.Now())
	return 0
}

// printProxies renders /v1/proxies like istioctl proxy-status: one row per
// stream, each type as its status and the version it holds.
//
// Most of what it prints is what proxies and agents said of themselves
// (node ids, user agents, Envoy's NACK text, relayed Envoys): control
// characters in it are escaped, so a hostile client cannot write terminal
// escape sequences to the operator's screen.
func printProxies(w io.Writer, proxies []serve.ProxyStatus, now time.Time) {
	w = printableWriter{w}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNODE CLUSTER\tGROUP\tKIND\tSTATUS\tCDS\tEDS\tLDS\tRDS\tAGENT\tENVOY\tCONNECTED")
	for _, p := range proxies {
		group := p.Group
		if group == "" {
			group = "-"
		}
		cols := []string{p.NodeID, p.NodeCluster, group, p.Kind, p.Status}
		for _, t := range []string{"CDS", "EDS", "LDS", "RDS"} {
			cols = append(cols, typeCell(p.Types[t]))
		}
		cols = append(cols, orDash(p.UserAgent), orDash(p.EnvoyVersion), now.Sub(p.ConnectedSince).Round(time.Second).String())
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	tw.Flush()
	for _, p := range proxies {
		if p.GroupError != "" {
			fmt.Fprintf(w, "\n%s group %s kept at its last good state: %s\n", p.NodeID, p.Group, p.GroupError)
		}
		for _, t := range []string{"CDS", "EDS", "LDS", "RDS"} {
			if ts := p.Types[t]; ts != nil && ts.Status == serve.StatusNACKed && ts.LastNACK != nil {
				fmt.Fprintf(w, "\n%s %s NACKed version %s: %s\n", p.NodeID, t, ts.LastNACK.Version, ts.LastNACK.Error)
			}
		}
		// What /v1/proxies and the console say of an older Envoy: the
		// features it is served in an older form or without.
		if len(p.Downgraded) > 0 {
			fmt.Fprintf(w, "\n%s runs Envoy %s, served differently from the newest: %s\n", p.NodeID, p.EnvoyVersion, strings.Join(p.Downgraded, "; "))
		}
		if len(p.RelayedEnvoys) > 0 {
			fmt.Fprintf(w, "\n%s relays to: %s\n", p.NodeID, strings.Join(p.RelayedEnvoys, ", "))
		}
	}
}

func typeCell(t *serve.TypeStatus) string {
	if t == nil {
		return "-"
	}
	v := t.VersionAcked
	if v == "" {
		v = t.VersionSent
	}
	if len(v) > 8 {
		v = v[:8]
	}
	if v == "" {
		return t.Status
	}
	return t.Status + " " + v
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printableWriter escapes control characters other than newline and tab
// (strconv's graphic quoting) in what is written through it.
type printableWriter struct{ w io.Writer }

func (p printableWriter) Write(b []byte) (int, error) {
	s := string(b)
	if strings.IndexFunc(s, func(r rune) bool { return r != '\n' && r != '\t' && !unicode.IsGraphic(r) }) < 0 {
		return p.w.Write(b)
	}
	var out strings.Builder
	for _, r := range s {
		if r == '\n' || r == '\t' || unicode.IsGraphic(r) {
			out.WriteRune(r)
			continue
		}
		q := strconv.QuoteRuneToGraphic(r)
		out.WriteString(q[1 : len(q)-1])
	}
	if _, err := io.WriteString(p.w, out.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}
