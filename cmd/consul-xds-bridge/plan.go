package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/plan"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// planCmd exits 0 with no changes, 2 with changes, 1 on error, so scripts
// can gate a policy push on it.
func planCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var configs stringList
	fs.Var(&configs, "config", "configuration file (HCL) with the policy to plan; repeat for several")
	cluster := fs.String("cluster", "", "plan only for proxies with this node.cluster (default: shared clusters and every proxy group)")
	admin := fs.String("admin", "", "running bridge's admin address (default: the config's admin block)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if len(configs) == 0 {
		fmt.Fprintln(stderr, "plan: at least one -config FILE is required")
		return 2
	}
	cfg, _, diags := policy.LoadFiles(configs...)
	if diags.HasErrors() {
		printDiagnostics(stderr, diags)
		return 1
	}
	addr := *admin
	if addr == "" {
		addr = cfg.Settings.Admin.Listen
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	s := cfg.Settings.Consul
	client, err := consul.NewClient(consul.ClientConfig{Address: s.Address, Datacenter: s.Datacenter, TokenFile: s.TokenFile})
	if err != nil {
		fmt.Fprintf(stderr, "plan: %v\n", err)
		return 1
	}
	cat, err := consul.FetchCatalog(ctx, client, model.WatchTargets(cfg.Policy), consul.QueryOptions{Datacenter: s.Datacenter, Stale: s.Stale})
	if err != nil {
		fmt.Fprintf(stderr, "plan: reading Consul: %v\n", err)
		return 1
	}
	m, warnings := model.Build(cat, cfg.Policy)
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	out, err := xds.Translate(m)
	if err != nil {
		fmt.Fprintf(stderr, "plan: %v\n", err)
		return 1
	}

	targets := []string{""} // shared clusters and endpoints
	if *cluster != "" {
		targets = []string{*cluster}
	} else {
		for _, p := range cfg.Policy.Proxies {
			targets = append(targets, p.Name)
		}
	}
	changed := false
	for _, nc := range targets {
		group := ""
		if p := cfg.Policy.ProxyFor(nc); p != nil {
			group = p.Name
		}
		var running xds.ConfigDump
		if err := getJSON(addr, "/v1/config_dump?cluster="+url.QueryEscape(nc), &running); err != nil {
			fmt.Fprintf(stderr, "plan: %v\n", err)
			return 1
		}
		planned, err := plan.Dump(out, nc, group)
		if err != nil {
			fmt.Fprintf(stderr, "plan: %v\n", err)
			return 1
		}
		title := "Shared clusters and endpoints:"
		if nc != "" {
			title = fmt.Sprintf("Proxies with node.cluster %q (group %q):", nc, group)
			if *cluster == "" {
				// Shared resources were planned once above.
				running.Clusters, running.Endpoints, planned.Clusters, planned.Endpoints = nil, nil, nil, nil
				running.Secrets = plan.OnlyGroupSecrets(running.Secrets, out.Shared)
				planned.Secrets = plan.OnlyGroupSecrets(planned.Secrets, out.Shared)
			}
		}
		changes, err := plan.Diff(&running, planned)
		if err != nil {
			fmt.Fprintf(stderr, "plan: %v\n", err)
			return 1
		}
		plan.Render(stdout, title, changes)
		changed = changed || len(changes) > 0
	}
	if changed {
		return 2
	}
	return 0
}
