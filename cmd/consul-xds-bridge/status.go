package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// adminAddr picks the admin address: -admin wins, else the config file's
// admin block, else the default.
func adminAddr(flagAddr string, configs []string) (string, error) {
	if flagAddr != "" {
		return flagAddr, nil
	}
	if len(configs) > 0 {
		cfg, _, diags := policy.LoadFiles(configs...)
		if diags.HasErrors() {
			return "", fmt.Errorf("%s", strings.Join(policy.FormatDiagnostics(diags), "\n"))
		}
		return cfg.Settings.Admin.Listen, nil
	}
	return policy.DefaultAdminListen, nil
}

// getJSON fetches an admin endpoint into v.
func getJSON(addr, path string, v any) error {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return fmt.Errorf("admin API at %s: %w (is the bridge running? set -admin ADDR)", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func statusCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", "", "bridge admin address host:port (default: from -config, else "+policy.DefaultAdminListen+")")
	var configs stringList
	fs.Var(&configs, "config", "configuration file to take the admin address from")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	addr, err := adminAddr(*admin, configs)
	if err != nil {
		fmt.Fprintf(stderr, "status: %v\n", err)
		return 1
	}
	var proxies []serve.ProxyStatus
	if err := getJSON(addr, "/v1/proxies", &proxies); err != nil {
		fmt.Fprintf(stderr, "status: %v\n", err)
		return 1
	}
	printProxies(stdout, proxies, time.Now())
	return 0
}

// printProxies renders /v1/proxies like istioctl proxy-status: one row per
// stream, each type as its status and the version it holds.
func printProxies(w io.Writer, proxies []serve.ProxyStatus, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNODE CLUSTER\tGROUP\tKIND\tSTATUS\tCDS\tEDS\tLDS\tRDS\tAGENT\tCONNECTED")
	for _, p := range proxies {
		group := p.Group
		if group == "" {
			group = "-"
		}
		cols := []string{p.NodeID, p.NodeCluster, group, p.Kind, p.Status}
		for _, t := range []string{"CDS", "EDS", "LDS", "RDS"} {
			cols = append(cols, typeCell(p.Types[t]))
		}
		cols = append(cols, orDash(p.UserAgent), now.Sub(p.ConnectedSince).Round(time.Second).String())
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
