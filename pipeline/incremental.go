package pipeline

import (
	"slices"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
)

// The endpoint-only path (issue 40). When the watcher says a change
// touched only instances and health, Compute asks the model's index of
// the last world (model.EndpointIndex) to recompute just the endpoints of
// the clusters the changed services feed, and hands the translator a
// model that shares everything else with the last one: its memo finds the
// unchanged clusters, listeners and routes as they were, so it builds the
// changed load assignments only. The index checks the catalog itself
// (model/incremental.go has the rule) and declines whatever it cannot
// recompute exactly; Compute then builds the whole world, as it does for
// every change not known to be endpoint-only. Either way the World is the
// same.

// lastWorld is what the endpoint-only path needs of the last world.
type lastWorld struct {
	world      *World
	index      *model.EndpointIndex
	datacenter string
}

// remember keeps w as the world the next change starts from.
func (m *Memo) remember(w *World, index *model.EndpointIndex, datacenter string) {
	m.last = &lastWorld{world: w, index: index, datacenter: datacenter}
}

// endpointsOnly computes in's world from the last one when in.Change is
// endpoint-only and the model's index can recompute it; ok is false when
// the whole pipeline must run.
func (m *Memo) endpointsOnly(in Input) (w *World, ok bool, err error) {
	last := m.last
	if !in.Change.EndpointsOnly() || last == nil || last.datacenter != in.Datacenter {
		return nil, false, nil
	}
	r, ok := last.index.Rebuild(last.world.Model, in.Catalog, in.Policy)
	if !ok {
		return nil, false, nil
	}
	out, ok, err := m.tr.TranslateEndpoints(r.Model, r.Clusters)
	if !ok {
		out, err = m.tr.Translate(r.Model)
	}
	if err != nil {
		// What the whole pipeline would answer: the same model fails
		// the same translation.
		return nil, true, err
	}
	w = &World{
		Model:  r.Model,
		Output: out,
		// The rule lets nothing change that a warning says. A copy:
		// callers append to a world's warnings.
		Warnings:      slices.Clone(last.world.Warnings),
		EndpointsOnly: true,
		Incremental:   true,
	}
	m.remember(w, r.Index, in.Datacenter)
	return w, true, nil
}

// ServicesFeeding returns, sorted, the Consul services whose instances
// feed the named clusters of the last world computed with this memo (nil
// before any).
func (m *Memo) ServicesFeeding(clusters []string) []consul.ServiceKey {
	if m == nil || m.last == nil {
		return nil
	}
	return m.last.index.ServicesFeeding(m.last.world.Model, clusters)
}

// LastWorld is the last world computed with this memo, nil before any.
func (m *Memo) LastWorld() *World {
	if m == nil || m.last == nil {
		return nil
	}
	return m.last.world
}
