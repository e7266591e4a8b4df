package bridge

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline/plan"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// PlanResult is what POST /v1/plan answers: the diagnostics of the
// policy with the document in place, or the changes it would push, like
// `consul-xds-bridge plan`, shared resources first and then per group.
type PlanResult struct {
	// Document is the name the pasted document was planned as; Replaces
	// says whether it took the place of an active source of that name
	// (otherwise it was added after them).
	Document    string        `json:"document"`
	Replaces    bool          `json:"replaces"`
	Diagnostics []string      `json:"diagnostics,omitempty"`
	Warnings    []string      `json:"warnings,omitempty"`
	Sections    []PlanSection `json:"sections,omitempty"`
	Changed     bool          `json:"changed"`
}

// PlanSection is the changes for one node.cluster ("" for the shared
// clusters, endpoints and secrets).
type PlanSection struct {
	Title       string `json:"title"`
	NodeCluster string `json:"node_cluster"`
	// Proxyless says the section is proxyless gRPC clients' (announcing
	// NodeCluster); Proxies is how many connected proxies have the role.
	Proxyless bool         `json:"proxyless,omitempty"`
	Proxies   int          `json:"proxies"`
	Group     string       `json:"group,omitempty"`
	Changes   []PlanChange `json:"changes"`
}

// PlanChange is one plan.Change as JSON.
type PlanChange struct {
	Action string   `json:"action"`
	Kind   string   `json:"kind"`
	Name   string   `json:"name"`
	Detail string   `json:"detail,omitempty"`
	Fields []string `json:"fields,omitempty"`
}

// servePlan plans the document of a JSON request {"name", "document"}
// (name SOURCE replaces that active file or KV key; another name adds a
// document; ?name= works too) against the catalog of the last good build
// and diffs it with what is served now. It changes nothing: the daemon's
// policy only ever comes from its files and KV. Plans are bounded so that
// no client, or eight, can slow what the bridge serves (planlimits.go):
// the body is read within planReadTimeout before anything else, one plan
// runs at a time, its parse has the daemon's ParseBudget, and files the
// document names are never read (planFiles).
func (d *Daemon) servePlan(w http.ResponseWriter, r *http.Request) {
	base := d.planBase.Load()
	if base == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "nothing served yet: the bridge has not completed its first sync"})
		return
	}
	req, code, err := readPlanRequest(w, r)
	if err != nil {
		writeJSON(w, code, map[string]string{"error": err.Error()})
		return
	}
	release, ok := d.acquirePlan()
	if !ok {
		w.Header().Set("Retry-After", "2")
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "another plan is running; plans run one at a time, retry in a few seconds"})
		return
	}
	defer release()
	name, body := req.Name, []byte(req.Document)
	res := &PlanResult{Document: name}
	fromKV := false
	for _, doc := range base.docs {
		if doc.Name == name {
			res.Replaces, fromKV = true, doc.FromKV
		}
	}
	// The plans' one parser, with the daemon's budget: a hostile paste
	// costs at most one core for ParseBudget, like a hostile KV write.
	doc, diags, busy := d.planParser.ParseWithin(name, body, fromKV, planWait)
	d.planParser.endRead()
	if busy {
		w.Header().Set("Retry-After", "2")
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "the plan parser is still busy with an earlier document that ran over its time budget; retry in a few seconds"})
		return
	}
	var docs []*policy.Document
	if doc != nil {
		for _, old := range base.docs {
			if old.Name != name {
				docs = append(docs, old)
			} else {
				docs = append(docs, doc)
			}
		}
		if !res.Replaces {
			docs = append(docs, doc)
		}
	}
	var cfg *policy.Config
	if !diags.HasErrors() {
		var ds hcl.Diagnostics
		cfg, ds = policy.Merge(docs...)
		diags = append(diags, ds...)
	}
	if !diags.HasErrors() {
		// What a reload would refuse: keys the xDS settings do not protect.
		diags = append(diags, policy.CheckKeyTransport(d.cfg.Settings.XDS, cfg.Policy)...)
		diags = append(diags, planFiles(cfg.Policy, base.policy)...)
	}
	var out *xds.Output
	if !diags.HasErrors() {
		world, err := pipeline.Compute(pipeline.Input{Catalog: base.catalog, Policy: cfg.Policy, Datacenter: d.cfg.Settings.Consul.Datacenter}, nil)
		diags = append(diags, pipeline.DiagnoseExcept(world, err, cfg.Policy, d.Policy().FailingGroups())...)
		if err == nil {
			res.Warnings, out = world.Warnings, world.Output
		}
	}
	res.Diagnostics = policy.FormatDiagnostics(diags)
	if diags.HasErrors() {
		writeJSON(w, http.StatusUnprocessableEntity, res)
		return
	}
	if le := d.Policy().LastError; le != nil {
		// The plan is against the last accepted documents; while a
		// rejected source (a broken KV document, another file) is unfixed,
		// saving this one is rejected with it, and the plan is not what
		// will be served.
		res.Warnings = append([]string{fmt.Sprintf("the bridge's last reload (%s) was rejected and it serves the last accepted policy: this plan is against that; saving the document is rejected too until what /v1/policy last_error names is fixed: %s",
			le.At.UTC().Format(time.RFC3339), strings.Join(le.Diagnostics, "; "))}, res.Warnings...)
	}
	if err := d.planSections(res, out, base.policy, cfg.Policy); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// planSections diffs the planned output with what the server serves, as
// the plan command does with /v1/config_dump: every role the planned
// world or a connected proxy has (policy groups, Connect sidecars,
// proxyless clients, nodes in no group), each with its connected proxies.
func (d *Daemon) planSections(res *PlanResult, out *xds.Output, _, planned *policy.Policy) error {
	connected := map[plan.Role]int{}
	for _, p := range d.xds.Proxies() {
		connected[plan.ConnectedRole(p.NodeCluster, p.Group, p.UserAgent)]++
	}
	running := func(r plan.Role) (*xds.ConfigDump, error) {
		key := r.NodeCluster
		if r.Proxyless {
			key = serve.ProxylessKey(key)
		}
		return d.xds.ConfigDump("", key)
	}
	secs, err := plan.Sections(out, pipeline.GroupOf(planned), plan.Roles(out, slices.Collect(maps.Keys(connected))), running, connected)
	if err != nil {
		return err
	}
	for _, sec := range secs {
		ps := PlanSection{Title: sec.Title, NodeCluster: sec.Role.NodeCluster, Proxyless: sec.Role.Proxyless, Proxies: sec.Proxies, Group: sec.Group, Changes: []PlanChange{}}
		for _, c := range sec.Changes {
			ps.Changes = append(ps.Changes, PlanChange{Action: string(c.Action), Kind: c.Kind, Name: c.Name, Detail: c.Detail, Fields: c.Fields})
		}
		res.Changed = res.Changed || len(sec.Changes) > 0
		res.Sections = append(res.Sections, ps)
	}
	return nil
}
