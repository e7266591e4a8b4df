package consul

import "slices"

// Change is what an Update changed since the update before it, so that
// the stages after the watcher need not rediscover it by comparing whole
// catalogs. Its zero value says nothing narrower is known: anything may
// have changed, which is always a correct answer.
type Change struct {
	// Services lists, sorted, the targets whose instances or health
	// changed.
	Services []ServiceKey
	// Endpoints says that is all that changed: the same targets, each
	// read before, the same service list. A target that appears (or is
	// read for the first time), goes, or turns unreachable is a change
	// of structure, and so is a new service list under AllLocal.
	Endpoints bool
}

// EndpointsOnly reports whether the change is known to touch only the
// instances (their health, and also their addresses, tags and meta) of the
// services it names: no service came, went or was retargeted. Whether the
// served structure stayed is the pipeline's to find out (it compares the
// catalogs), since new tags or meta may change subsets and tag routes.
func (c Change) EndpointsOnly() bool { return c.Endpoints && len(c.Services) > 0 }

// Merge is the change of two updates in a row: the union of their
// services, endpoints-only if both were.
func (c Change) Merge(next Change) Change {
	out := Change{Endpoints: c.Endpoints && next.Endpoints}
	out.Services = append(slices.Clone(c.Services), next.Services...)
	slices.SortFunc(out.Services, compareKeys)
	out.Services = slices.Compact(out.Services)
	return out
}

// endpointChange is the change of one target's instances or health.
func endpointChange(k ServiceKey) Change { return Change{Services: []ServiceKey{k}, Endpoints: true} }
