// Package pipeline is the one place the served world is computed: the
// Consul catalog (with the mesh's data joined), the policy and the daemon's
// settings go in; what every role is served comes out — proxy groups,
// proxyless gRPC clients, Connect sidecars and nodes in no group — with
// each role's failure, as model.Build, model.BuildMeshGRPC and the xDS
// translator make it. The daemon's build, its reload gate, `validate`,
// `plan` (CLI, admin API, console), route tests and the bench baseline all
// call Compute, so none of them can check a different world than the one
// served: a stage added here is added for every tool at once.
//
// Like its stages it is pure: no I/O, no clock, no goroutine. The memory
// that makes a small change cheap (the translator's memo and each group's
// last good reach) lives in a Memo the caller owns; the reload gate works
// on a Fork, so a rejected candidate leaves the served memory as it was.
//
// Which changes go through which path (incremental.go): a change the
// watcher reports as endpoint-only (consul.Change.EndpointsOnly), with
// the memo's last world computed from the same policy and datacenter, is
// computed from that world when the catalog has the same services and
// they differ from the last one's in nothing but their instances' status,
// checks and weights, and neither catalog has mesh (Connect) data: only
// the endpoints of the clusters those services feed (subsets, failover
// tiers and targets, proxyless copies) are recomputed, by the model's own
// code, and only their load assignments translated. Everything else goes
// through the whole pipeline: an instance that comes or goes, a changed
// address, port, tag or meta (which may move an instance between
// subsets, make a tag route or a warning), a service that appears, goes
// or is read for the first time, any policy, settings, KV or config-entry
// change, and every change while the mesh is followed. Both paths compute
// the same World (TestEndpointOnlyIsTheWholeWorld).
package pipeline

import (
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// Input is everything the served world is computed from.
type Input struct {
	// Catalog is Consul's catalog with the mesh's registrations, CA,
	// intentions and protocols joined as Catalog.Mesh; nil is an empty
	// catalog.
	Catalog *consul.Catalog
	// Policy is the validated policy; nil mirrors the catalog (one
	// cluster per service), as model.Build does.
	Policy *policy.Policy
	// Datacenter is the local datacenter (consul.datacenter; "" takes the
	// one the instances' health entries name).
	Datacenter string
	// Change is what changed since the previous Compute with the same
	// Memo, as the Consul watcher reported it. The zero value (nothing
	// known) is always correct: it computes everything.
	Change consul.Change
}

// World is what every role is served, and why some role is not.
type World struct {
	// Model is the resolved world (ir), before translation.
	Model *ir.Model
	// Output is the translated world: shared clusters and endpoints, and
	// listeners, routes and secrets per role. Output.Failed and
	// Output.ProxylessFailed name the roles that keep their last good
	// resources (see Failures).
	Output *xds.Output
	// Warnings are what the daemon logs for this world: odd catalog data,
	// policy references to services Consul does not have, notes on what
	// could not be served as written.
	Warnings []string
	// EndpointsOnly says how the world was asked for: Change named only
	// known services whose instances changed (consul.Change.EndpointsOnly).
	// It does not say the structure stayed: an instance's new tags, address
	// or meta are an instance change too, and may change subsets, tag
	// routes or warnings. Incremental says whether the previous world's
	// structure was kept.
	EndpointsOnly bool
	// Incremental says the world was computed by the endpoint-only path
	// (incremental.go) rather than built whole; it is the same world.
	Incremental bool
}

// Memo is what one caller's successive Computes remember of each other:
// the translator's memo, so an unchanged cluster or listener is the same
// object already validated, and each group's last good reach, which a
// failing group falls back on. It is not safe for concurrent use; one
// goroutine owns it.
type Memo struct {
	tr *xds.Translator
	// last is the last world computed with this memo and what an
	// endpoint-only change needs of it (incremental.go); nil before the
	// first.
	last *lastWorld
}

// NewMemo returns a Memo that remembers nothing yet.
func NewMemo() *Memo { return &Memo{tr: xds.NewTranslator()} }

// Fork returns a Memo that starts with m's memory and never changes m's:
// the reload gate computes a candidate policy's world on a fork, and the
// daemon adopts the fork only when the candidate is accepted. A nil Memo
// forks into a fresh one.
func (m *Memo) Fork() *Memo {
	if m == nil {
		return NewMemo()
	}
	// last is never modified, only replaced: sharing it is copying it.
	return &Memo{tr: m.tr.Fork(), last: m.last}
}

// Compute computes the world for in, reusing (and updating) memo's memory;
// a nil memo computes from scratch and remembers nothing. It fails only
// when the resources every role shares (clusters, endpoints, upstream
// secrets) cannot be served; a failure of one role is in the World (see
// Failures) and every other role is served.
func Compute(in Input, memo *Memo) (*World, error) {
	if memo == nil {
		memo = NewMemo()
	}
	if w, ok, err := memo.endpointsOnly(in); ok {
		return w, err
	}
	m, warnings, index := model.BuildIndexed(in.Catalog, in.Policy)
	// The proxyless gRPC mesh: Connect-native servers (model/meshgrpc.go).
	warnings = append(warnings, model.BuildMeshGRPC(m, in.Catalog, in.Policy, in.Datacenter)...)
	out, err := memo.tr.Translate(m)
	if err != nil {
		return nil, err
	}
	w := &World{Model: m, Output: out, Warnings: warnings, EndpointsOnly: in.Change.EndpointsOnly()}
	memo.remember(w, index, in.Datacenter)
	return w, nil
}

// GroupOf is the rule that maps a node.cluster to the group it is served
// as under pol ("" for none): a Connect sidecar's group key (serving
// rewrites a sidecar's node.cluster to it) is its own group, else the
// policy's proxy group the name matches. Serving and plan share it, so a
// plan shows each node what the daemon would serve it.
func GroupOf(pol *policy.Policy) func(nodeCluster string) string {
	return func(nodeCluster string) string {
		if strings.HasPrefix(nodeCluster, ir.SidecarGroupPrefix) {
			return nodeCluster
		}
		if p := pol.ProxyFor(nodeCluster); p != nil {
			return p.Name
		}
		return ""
	}
}
