package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline/plan"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/configentry"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/envoycompat"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/hcl/v2"
)

// planCmd exits 0 with no changes, 2 with changes, 1 on error, so scripts
// can gate a policy push on it. A usage error is an error too (1), not
// the flag package's 2, which a gate would read as "changes".
func planCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("plan", stderr)
	var configs configPaths
	fs.Var(&configs, "config", "configuration `FILE` (HCL) with the policy to plan, or a directory of *.hcl files; repeat for several")
	cluster := fs.String("cluster", "", "print only the roles with this node.cluster (every role is still planned: the exit code covers them all)")
	node := fs.String("node", "", "print only the role of the connected proxy with this node id")
	var af adminFlags
	af.register(fs)
	kvKey := fs.String("kv-key", "", "plan a new version of this KV policy document (full key under kv_prefix), read from the FILE argument")
	rest, code, ok := parseCommand(fs, args, stdout, stderr)
	if !ok {
		return min(code, 1)
	}
	if len(configs) == 0 {
		fmt.Fprintln(stderr, "plan: at least one -config FILE is required (the files the bridge runs with)")
		return 1
	}
	if (*kvKey != "") != (len(rest) == 1) || len(rest) > 1 {
		fmt.Fprintln(stderr, "plan: -kv-key KEY takes the new document as its one FILE argument: plan -config central.hcl -kv-key KEY FILE")
		return 1
	}
	cfg, _, diags := policy.LoadFiles(configs...)
	if diags.HasErrors() {
		printDiagnostics(stderr, diags)
		return 1
	}
	admin, err := newAdminClient(af, &cfg.Settings)
	if err != nil {
		fmt.Fprintf(stderr, "plan: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	s := cfg.Settings.Consul
	client, err := consul.NewClient(consul.ClientConfig{Address: s.Address, Datacenter: s.Datacenter, TokenFile: s.TokenFile})
	if err != nil {
		fmt.Fprintf(stderr, "plan: %v\n", err)
		return 1
	}
	if s.KVPrefix != "" || *kvKey != "" || s.ConfigEntries {
		// The running bridge merges the KV documents and then its
		// documents of Consul's config entries after the files: so does
		// the plan, with -kv-key's new version in place of the key's.
		if cfg, err = withConsulPolicy(ctx, client, configs, cfg, *kvKey, strings.Join(rest, ""), stderr); err != nil {
			fmt.Fprintf(stderr, "plan: %v\n", err)
			return 1
		}
	}
	cat, err := readConsulWorld(ctx, client, cfg, false)
	if err != nil {
		fmt.Fprintf(stderr, "plan: %v\n", err)
		return 1
	}
	// What the daemon's reload refuses, plan refuses too (as /v1/plan):
	// a key its xDS settings do not protect, a policy whose translation
	// Envoy would reject. Planned as a diff, the reload then rejected kept
	// the running world while plan showed it changed.
	if ds := policy.CheckKeyTransport(cfg.Settings.XDS, cfg.Policy); ds.HasErrors() {
		fmt.Fprintln(stderr, "plan: the bridge would refuse this policy on reload and keep serving the running one:")
		printDiagnostics(stderr, ds)
		return 1
	}
	var runningPolicy bridge.PolicyStatus
	if err := admin.getJSON("/v1/policy", &runningPolicy); err != nil {
		fmt.Fprintf(stderr, "plan: %v\n", err)
		return 1
	}
	// Groups the running bridge already fails to translate keep their
	// last good state whatever the policy; its reload does not refuse a
	// policy for them, and neither does plan (their sections say so).
	failing := runningPolicy.FailingGroups()
	world, err := pipeline.Compute(pipeline.Input{Catalog: cat, Policy: cfg.Policy, Datacenter: s.Datacenter}, nil)
	if ds := pipeline.DiagnoseExcept(world, err, cfg.Policy, failing); ds.HasErrors() {
		fmt.Fprintln(stderr, "plan: the bridge would refuse this policy on reload and keep serving the running one:")
		printDiagnostics(stderr, ds)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "plan: %v\n", err)
		return 1
	}
	for _, w := range world.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	out := world.Output

	// Every role is planned whatever is printed: -cluster and -node only
	// narrow the output, so a narrowed plan cannot hide a change to
	// another role from its exit code.
	if changed := settingsDrift(runningPolicy.Running, cfg); len(changed) > 0 {
		fmt.Fprintf(stderr, "warning: the bridge runs with other daemon settings than these files give (%s); a reload keeps its own, they apply only after a restart: this plan is what a restart would serve, not a reload\n", strings.Join(changed, ", "))
	}
	var proxies []serve.ProxyStatus
	if err := admin.getJSON("/v1/proxies", &proxies); err != nil {
		fmt.Fprintf(stderr, "plan: %v\n", err)
		return 1
	}
	connected := map[plan.Role]int{}
	var nodeRole *plan.Role
	for _, p := range proxies {
		r := plan.ConnectedRole(p.NodeCluster, p.Group, p.UserAgent)
		connected[r]++
		if p.NodeID == *node {
			nodeRole = &r
		}
	}
	if *node != "" && nodeRole == nil {
		fmt.Fprintf(stderr, "plan: no connected proxy has node id %q (see consul-xds-bridge status)\n", *node)
		return 1
	}
	running := func(r plan.Role) (*xds.ConfigDump, error) {
		q := url.Values{"cluster": {r.NodeCluster}}
		if r.Proxyless {
			q.Set("proxyless", "true")
		}
		var d xds.ConfigDump
		return &d, admin.getJSON("/v1/config_dump?"+q.Encode(), &d)
	}
	secs, err := plan.Sections(out, pipeline.GroupOf(cfg.Policy), plan.Roles(out, slices.Collect(maps.Keys(connected))), running, connected)
	if err != nil {
		fmt.Fprintf(stderr, "plan: %v\n", err)
		return 1
	}
	stillFailing := map[string]bool{}
	for _, f := range world.Failures() {
		stillFailing[f.Group] = failing[f.Group]
	}
	for i := range secs {
		if stillFailing[secs[i].Group] {
			secs[i].Title += " — failing: keeps the last good state it is served now"
			secs[i].Changes = []plan.Change{}
		}
	}
	var show func(plan.Role) bool
	switch {
	case nodeRole != nil:
		show = func(r plan.Role) bool { return r == *nodeRole }
	case *cluster != "":
		show = func(r plan.Role) bool { return r.NodeCluster == *cluster }
	}
	plan.RenderSections(stdout, secs, show)
	printOlderEnvoys(stdout, proxies, show)
	if plan.Summarize(secs, nil).Roles > 0 {
		return 2
	}
	return 0
}

// withConsulPolicy loads the policy of files (whose config is cfg) merged
// with what the running bridge merges from Consul: the KV documents under
// the config's kv_prefix, the document under kvKey (if set) replaced by,
// or added as, newFile's contents; then, with consul.config_entries, the
// documents of the config entries, made as the daemon makes them (an
// entry the bridge cannot take is left out with a warning, as served).
func withConsulPolicy(ctx context.Context, client *api.Client, files []string, cfg *policy.Config, kvKey, newFile string, stderr io.Writer) (*policy.Config, error) {
	s := cfg.Settings.Consul
	var docs []*policy.Document
	var diags hcl.Diagnostics
	if s.KVPrefix != "" || kvKey != "" {
		kv, err := kvDocuments(ctx, client, s, kvKey, newFile)
		if err != nil {
			return nil, err
		}
		for _, key := range slices.Sorted(maps.Keys(kv)) {
			doc, ds := policy.ParseKV(key, kv[key])
			diags = append(diags, ds...)
			if doc != nil {
				docs = append(docs, doc)
			}
		}
	}
	if s.ConfigEntries {
		entries, err := consul.FetchConfigEntries(ctx, client, configentry.Kinds, consul.QueryOptions{Datacenter: s.Datacenter, Stale: s.Stale})
		if err != nil {
			return nil, fmt.Errorf("reading Consul's config entries (consul.config_entries): %w", err)
		}
		// The daemon decides the mesh from the files' policy at start.
		collected, refused := configentry.Collect(entries, cfg.Policy.UsesMesh())
		made, notes, rejected := configentry.Checked(collected)
		notes = append(refused, notes...)
		for _, d := range made {
			doc, ds := policy.ParseKV(d.Name, d.Source)
			diags = append(diags, ds...)
			if doc != nil {
				docs = append(docs, doc)
			}
		}
		if w := configentry.Warnings(notes, rejected); len(w) > 0 {
			printDiagnostics(stderr, w)
		}
	}
	if !diags.HasErrors() {
		merged, _, ds := policy.LoadWith(files, docs)
		if diags = append(diags, ds...); !diags.HasErrors() {
			return merged, nil
		}
	}
	printDiagnostics(stderr, diags)
	return nil, fmt.Errorf("the policy with the documents from Consul is invalid")
}

// kvDocuments reads the KV documents under the config's kv_prefix, the
// document under kvKey (if set) replaced by, or added as, newFile's
// contents.
func kvDocuments(ctx context.Context, client *api.Client, s policy.ConsulSettings, kvKey, newFile string) (map[string][]byte, error) {
	if s.KVPrefix == "" {
		return nil, fmt.Errorf("-kv-key needs consul { kv_prefix } in the config")
	}
	if kvKey != "" && !strings.HasPrefix(kvKey, s.KVPrefix) {
		return nil, fmt.Errorf("-kv-key %q is not under kv_prefix %q; the bridge would not read it", kvKey, s.KVPrefix)
	}
	kv, err := consul.FetchKV(ctx, client, s.KVPrefix, consul.QueryOptions{Datacenter: s.Datacenter, Stale: s.Stale})
	if err != nil {
		return nil, fmt.Errorf("reading Consul KV: %w", err)
	}
	if len(kv.Rejected) > 0 {
		return nil, fmt.Errorf("KV documents over the limits, which the bridge rejects too: %s", strings.Join(kv.Rejected, "; "))
	}
	values := map[string][]byte{}
	for _, d := range kv.Documents {
		values[d.Key] = d.Value
	}
	if kvKey != "" {
		// Bounded as the bridge bounds a KV document: a larger file, a FIFO
		// or a device is refused before it is read whole (or hangs).
		b, err := policy.ReadBoundedFile(ctx, newFile, consul.DefaultMaxDocumentBytes)
		if err != nil {
			return nil, fmt.Errorf("-kv-key %s: %w (the bridge's limit for a KV document is %d bytes)", kvKey, err, consul.DefaultMaxDocumentBytes)
		}
		values[kvKey] = b
		if len(values) > consul.DefaultMaxDocuments {
			return nil, fmt.Errorf("-kv-key %q would make %d documents under %q, over the bridge's limit of %d", kvKey, len(values), s.KVPrefix, consul.DefaultMaxDocuments)
		}
	}
	return values, nil
}

// readConsulWorld reads once what the daemon watches for cfg's policy:
// the services it names (every local one too with allLocal) and, when
// the policy uses the mesh, the mesh's registrations, CA, intentions and
// protocols, joined to the catalog as the daemon joins them.
func readConsulWorld(ctx context.Context, client *api.Client, cfg *policy.Config, allLocal bool) (*consul.Catalog, error) {
	s := cfg.Settings.Consul
	q := consul.QueryOptions{Datacenter: s.Datacenter, Stale: s.Stale}
	targets := model.WatchTargets(cfg.Policy)
	targets.AllLocal = targets.AllLocal || allLocal
	var mesh *consul.Mesh
	if cfg.Policy.UsesMesh() {
		m, err := consul.FetchMesh(ctx, client, cfg.Policy.CentralMesh(), q, model.MeshWatchTargets(cfg.Policy))
		if err != nil {
			return nil, fmt.Errorf("reading Consul's mesh: %w", err)
		}
		mesh = m
		targets.Services = append(targets.Services, mesh.CatalogTargets()...)
	}
	cat, err := consul.FetchCatalog(ctx, client, targets, q)
	if err != nil {
		return nil, fmt.Errorf("reading Consul at %s: %w", s.Address, err)
	}
	cat.Mesh = mesh
	return cat, nil
}

// printOlderEnvoys says which connected proxies run an Envoy older than
// the newest features the plan shows: they are served a rewritten copy
// (xds/envoycompat), so a planned change may reach them without what
// their Envoy lacks. What they lack now is what /v1/proxies says.
func printOlderEnvoys(w io.Writer, proxies []serve.ProxyStatus, show func(plan.Role) bool) {
	byVersion := map[string][]string{} // "role, Envoy X.Y" -> node ids
	notes := map[string][]string{}
	for _, p := range proxies {
		v, ok := envoycompat.Parse(p.EnvoyVersion)
		if !ok || envoycompat.ClassOf(v).Current() {
			continue
		}
		r := plan.ConnectedRole(p.NodeCluster, p.Group, p.UserAgent)
		if show != nil && !show(r) {
			continue
		}
		k := fmt.Sprintf("%s, Envoy %s", r, v)
		byVersion[k] = append(byVersion[k], p.NodeID)
		if len(p.Downgraded) > 0 {
			notes[k] = p.Downgraded
		}
	}
	for _, k := range slices.Sorted(maps.Keys(byVersion)) {
		fmt.Fprintf(w, "\nNote: %s (%d connected): the plan shows what the newest Envoy gets; these proxies are served a rewritten copy without what their Envoy lacks", k, len(byVersion[k]))
		if n := notes[k]; len(n) > 0 {
			fmt.Fprintf(w, " (now: %s)", strings.Join(n, "; "))
		}
		fmt.Fprintln(w, ", and a planned change may reach them without it; see consul-xds-bridge status.")
	}
}

// settingsDrift names what of the daemon settings, and of whether the
// bridge follows Consul Connect, cfg gives differently from what the
// running bridge started with (nil for a bridge that does not say).
func settingsDrift(r *bridge.RunningSettings, cfg *policy.Config) []string {
	if r == nil {
		return nil
	}
	var out []string
	a, b := reflect.ValueOf(r.Settings), reflect.ValueOf(cfg.Settings)
	for i := range a.NumField() {
		block := a.Type().Field(i).Name
		if block == "Admin" || block == "Log" {
			continue // nothing served depends on them
		}
		fa, fb := a.Field(i), b.Field(i)
		if fa.Kind() != reflect.Struct {
			if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
				out = append(out, block)
			}
			continue
		}
		for j := range fa.NumField() {
			if block == "XDS" && fa.Type().Field(j).Name == "Listen" {
				continue // where, not what, it serves
			}
			if !reflect.DeepEqual(fa.Field(j).Interface(), fb.Field(j).Interface()) {
				out = append(out, strings.ToLower(block)+"."+fa.Type().Field(j).Name)
			}
		}
	}
	if r.FollowsConnect != cfg.Policy.UsesMesh() {
		out = append(out, "mesh (whether the bridge follows Consul Connect)")
	}
	return out
}
