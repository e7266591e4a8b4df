package bridge

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline/plan"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
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
	Title       string       `json:"title"`
	NodeCluster string       `json:"node_cluster"`
	Group       string       `json:"group,omitempty"`
	Changes     []PlanChange `json:"changes"`
}

// PlanChange is one plan.Change as JSON.
type PlanChange struct {
	Action string `json:"action"`
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Detail string `json:"detail,omitempty"`
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
		m, warnings := model.Build(base.catalog, cfg.Policy)
		res.Warnings = append(warnings, model.BuildMeshGRPC(m, base.catalog, cfg.Policy, d.cfg.Settings.Consul.Datacenter)...)
		out, err = xds.Translate(m)
		if err != nil {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Policy cannot be translated to Envoy resources", Detail: err.Error()})
		}
		for _, f := range groupFailures(out) {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError,
				Summary: fmt.Sprintf("Proxy group %q cannot be translated to Envoy resources", f.group),
				Detail:  f.err.Error(), Subject: failureRange(cfg.Policy, f.group, f.err)})
		}
	}
	res.Diagnostics = policy.FormatDiagnostics(diags)
	if diags.HasErrors() {
		writeJSON(w, http.StatusUnprocessableEntity, res)
		return
	}
	if err := d.planSections(res, out, base.policy, cfg.Policy); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// planSections diffs the planned output with what the server serves, as
// the plan command does with /v1/config_dump: the shared resources once,
// then every proxy group of the active or the planned policy.
func (d *Daemon) planSections(res *PlanResult, out *xds.Output, active, planned *policy.Policy) error {
	targets := []string{""}
	for _, pols := range []*policy.Policy{active, planned} {
		for _, p := range activeProxies(pols) { // a bridge may run with no policy
			if !slices.Contains(targets, p.Name) {
				targets = append(targets, p.Name)
			}
		}
	}
	slices.Sort(targets[1:])
	for _, nc := range targets {
		group := ""
		if p := planned.ProxyFor(nc); p != nil {
			group = p.Name
		}
		running, err := d.xds.ConfigDump("", nc)
		if err != nil {
			return err
		}
		want, err := plan.Dump(out, nc, group)
		if err != nil {
			return err
		}
		sec := PlanSection{Title: "Shared clusters, endpoints and secrets", NodeCluster: nc, Group: group, Changes: []PlanChange{}}
		if nc != "" {
			sec.Title = fmt.Sprintf("Proxies with node.cluster %q (group %q)", nc, group)
			running.Clusters, running.Endpoints, want.Clusters, want.Endpoints = nil, nil, nil, nil
			running.Secrets = plan.OnlyGroupSecrets(running.Secrets, out.Shared)
			want.Secrets = plan.OnlyGroupSecrets(want.Secrets, out.Shared)
		}
		changes, err := plan.Diff(running, want)
		if err != nil {
			return err
		}
		for _, c := range changes {
			sec.Changes = append(sec.Changes, PlanChange{Action: string(c.Action), Kind: c.Kind, Name: c.Name, Detail: c.Detail})
		}
		res.Changed = res.Changed || len(changes) > 0
		res.Sections = append(res.Sections, sec)
	}
	return nil
}
