package bridge

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
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

// servePlan plans the document in the request body (?name=SOURCE replaces
// that active file or KV key; another name adds a document) against the
// catalog of the last good build and diffs it with what is served now. It
// changes nothing: the daemon's policy only ever comes from its files and
// KV.
func (d *Daemon) servePlan(w http.ResponseWriter, r *http.Request) {
	base := d.planBase.Load()
	if base == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "nothing served yet: the bridge has not completed its first sync"})
		return
	}
	body, err := readPlanBody(w, r)
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": err.Error()})
		return
	}
	name := r.URL.Query().Get("name")
	if name == "" {
		name = "console.hcl"
	}
	res := &PlanResult{Document: name}
	fromKV := false
	for _, doc := range base.docs {
		if doc.Name == name {
			res.Replaces, fromKV = true, doc.FromKV
		}
	}
	// Parsed with the daemon's budget, so a hostile paste costs at most
	// one core for ParseBudget, like a hostile KV write.
	doc, diags := newDocParser(d.clock, ParseBudget).Parse(name, body, fromKV)
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
		diags = append(diags, cfg.Policy.ReadFiles(d.clock.Now())...)
	}
	var out *xds.Output
	if !diags.HasErrors() {
		w, err := pipeline.Compute(pipeline.Input{Catalog: base.catalog, Policy: cfg.Policy, Datacenter: d.cfg.Settings.Consul.Datacenter}, nil)
		diags = append(diags, pipeline.Diagnose(w, err, cfg.Policy)...)
		if err == nil {
			res.Warnings, out = w.Warnings, w.Output
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
		for _, p := range pols.Proxies {
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
