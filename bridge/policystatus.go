package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

type hclDiagnostics = hcl.Diagnostics

// PolicyStatus is what /v1/policy shows: the active policy's sources and
// the outcome of the last reload.
type PolicyStatus struct {
	// Waiting says why no policy is active yet, if none is.
	Waiting string `json:"waiting,omitempty"`
	// Sources of the active policy, files first, then KV keys.
	Sources  []SourceStatus `json:"sources"`
	LoadedAt time.Time      `json:"loaded_at"`
	// LastError is the last rejected reload, cleared by a good one.
	LastError         *ReloadError `json:"last_error,omitempty"`
	SuccessfulReloads int          `json:"successful_reloads"`
	FailedReloads     int          `json:"failed_reloads"`
	// PolicyWarnings are non-fatal diagnostics of the active policy.
	PolicyWarnings []string `json:"policy_warnings,omitempty"`
	// Warnings are problems found joining the policy with the catalog,
	// e.g. a route to a service Consul does not know.
	Warnings []string `json:"warnings,omitempty"`
	// FailedGroups are the proxy groups the last build could not translate
	// (odd Consul data Envoy would refuse): they keep serving their last
	// good listeners and routes while every other group updates.
	FailedGroups []GroupFailure `json:"failed_groups,omitempty"`
	// RouteSources says where the policy declares each served route, by
	// route configuration and route name ("edge.http/shop/0").
	RouteSources map[string]string `json:"route_sources,omitempty"`
	// Running is what the daemon runs with since its start, which a
	// reload does not change: its settings and whether it follows Consul
	// Connect. plan compares its files' with it.
	Running *RunningSettings `json:"running,omitempty"`
}

// RunningSettings are the daemon's start-time settings (no secrets: token
// files are paths) and whether it follows Consul Connect (a mesh block or
// sidecar_for in its files at start).
type RunningSettings struct {
	Settings       policy.Settings `json:"settings"`
	FollowsConnect bool            `json:"follows_connect"`
}

// GroupFailure is one proxy group's failed translation.
type GroupFailure struct {
	// Group is "" for the proxyless gRPC resources of no declared group.
	Group string `json:"group"`
	Error string `json:"error"`
}

// SourceStatus identifies one policy document by content.
type SourceStatus struct {
	Name        string `json:"name"`
	Kind        string `json:"kind"` // file or kv
	Hash        string `json:"sha256"`
	ModifyIndex uint64 `json:"modify_index,omitempty"`
}

// ReloadError is a rejected reload with its diagnostics.
type ReloadError struct {
	At          time.Time `json:"at"`
	Diagnostics []string  `json:"diagnostics"`
}

func hash(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func readError(file string, err error) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Cannot read configuration file",
		Detail:   err.Error(),
		Subject:  &hcl.Range{Filename: file},
	}
}

// kvRejected turns a KV watcher rejection ("key: reason") into a diagnostic.
func kvRejected(r string) *hcl.Diagnostic {
	key, reason, _ := strings.Cut(r, ": ")
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "KV document rejected",
		Detail:   reason + "; the policy is incomplete without it, so it is not applied.",
		Subject:  &hcl.Range{Filename: key},
	}
}

// redacted returns a copy of st with every text that may quote user input
// passed through policy.RedactSecrets: a private key pasted into the
// wrong field never appears on /v1/policy or the console. Diagnostics are
// already redacted by policy.FormatDiagnostics; warnings, failed groups'
// errors and route sources come from elsewhere.
func (st *PolicyStatus) redacted() *PolicyStatus {
	if st == nil {
		return nil
	}
	out := *st
	out.Waiting = policy.RedactSecrets(st.Waiting)
	redact := func(in []string) []string {
		if in == nil {
			return nil
		}
		r := make([]string, len(in))
		for i, s := range in {
			r[i] = policy.RedactSecrets(s)
		}
		return r
	}
	out.PolicyWarnings, out.Warnings = redact(st.PolicyWarnings), redact(st.Warnings)
	if st.LastError != nil {
		le := *st.LastError
		le.Diagnostics = redact(le.Diagnostics)
		out.LastError = &le
	}
	if st.FailedGroups != nil {
		out.FailedGroups = make([]GroupFailure, len(st.FailedGroups))
		for i, g := range st.FailedGroups {
			out.FailedGroups[i] = GroupFailure{Group: g.Group, Error: policy.RedactSecrets(g.Error)}
		}
	}
	if st.Sources != nil {
		out.Sources = make([]SourceStatus, len(st.Sources))
		for i, s := range st.Sources {
			s.Name = policy.RedactSecrets(s.Name)
			out.Sources[i] = s
		}
	}
	if st.RouteSources != nil {
		out.RouteSources = make(map[string]string, len(st.RouteSources))
		for k, v := range st.RouteSources {
			out.RouteSources[policy.RedactSecrets(k)] = policy.RedactSecrets(v)
		}
	}
	return &out
}

// failingSet is the names of failed groups.
func failingSet(failed []GroupFailure) map[string]bool {
	if len(failed) == 0 {
		return nil
	}
	m := make(map[string]bool, len(failed))
	for _, f := range failed {
		m[f.Group] = true
	}
	return m
}

// FailingGroups is the names of the groups the running bridge's last
// build could not translate (/v1/policy failed_groups), for tools that
// judge a policy as its reload would (pipeline.DiagnoseExcept).
func (st *PolicyStatus) FailingGroups() map[string]bool { return failingSet(st.FailedGroups) }
