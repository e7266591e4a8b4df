package configentry

import (
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/hcl/v2"
)

// Collect adds Consul's entries (the Kinds the bridge follows, as Consul
// lists them) for translation: an entry Add refuses is a note, and the
// others translate. mesh: the policy serves Connect sidecars (routers and
// splitters of HTTP services also become mesh_routes). The daemon and
// `plan` both start here, so a plan sees the entries the daemon serves.
func Collect(entries []api.ConfigEntry, mesh bool) (Entries, []Note) {
	var e Entries
	var notes []Note
	for _, entry := range entries {
		if err := e.Add(entry); err != nil {
			notes = append(notes, Note{Entry: entry.GetKind() + "/" + entry.GetName(), Text: err.Error()})
		}
	}
	e.Mesh = mesh
	return e, notes
}

// Warnings are notes and rejected entries as warnings located at their
// entry ("consul-config:service-router/web"): what the daemon shows on
// /v1/policy and `plan` prints, while every other entry keeps applying.
func Warnings(notes []Note, rejected []Rejected) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, r := range rejected {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagWarning, Summary: "Config entry rejected",
			Detail:  "Consul accepted this entry, but its translation is not a valid policy, so it is not served (the other entries and the HCL keep applying); fix or delete it: " + strings.Join(r.Diagnostics, "; "),
			Subject: &hcl.Range{Filename: DocPrefix + r.Entry}})
	}
	for _, n := range notes {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagWarning, Summary: "Config entry not fully translated", Detail: n.Text,
			Subject: &hcl.Range{Filename: DocPrefix + n.Entry}})
	}
	return diags
}
