package consul

import (
	"cmp"
	"slices"
	"time"
)

// Publishing a catalog. A full publish gathers every watch's data and
// sorts it: with thousands of services that is half a millisecond per
// health flip, more than the rest of the flip's build (issue 40). A flip
// changes the data of the watches it names and nothing else, so the
// watcher then copies the catalog it published last and puts the new
// data in place: the same catalog, the same Services objects for every
// service it did not re-read.

// lastPublish is what publish last built, owned by Run's goroutine.
type lastPublish struct {
	u       Update // without ChangedAt and Changed
	watches int    // how many watches there were
}

func (w *Watcher) publish(watches map[ServiceKey]*healthWatch, listLoaded bool, at time.Time, change Change) {
	u, ok := w.publishEndpoints(watches, change)
	if !ok {
		u = w.publishAll(watches, listLoaded)
	}
	w.last = &lastPublish{u: u, watches: len(watches)}
	u.ChangedAt, u.Changed = at, change
	// An update the consumer has not taken yet is folded into this one:
	// its change time and what it changed, so the consumer misses neither.
	publishMerged(w.updates, u, func(old, u *Update) {
		u.ChangedAt = minTime(old.ChangedAt, u.ChangedAt)
		u.Changed = old.Changed.Merge(u.Changed)
	})
}

// publishAll builds the update from every watch.
func (w *Watcher) publishAll(watches map[ServiceKey]*healthWatch, listLoaded bool) Update {
	u := Update{Complete: listLoaded}
	if sk := w.skipped.Load(); sk != nil {
		u.Skipped = slices.Clone(*sk)
	}
	services := make([]*Service, 0, len(watches))
	for k, hw := range watches {
		if hw.data == nil {
			// Not yet read: leave it out rather than serve it empty.
			u.Complete = false
			u.Pending = append(u.Pending, k)
			continue
		}
		if hw.unreachable {
			u.Unreachable = append(u.Unreachable, k)
		}
		services = append(services, hw.data)
	}
	slices.SortFunc(u.Pending, compareKeys)
	slices.SortFunc(u.Unreachable, compareKeys)
	u.Catalog = NewCatalog(services)
	return u
}

// publishEndpoints builds the update of an endpoint-only change from the
// last one, if it can. Run merges a batch's changes, and anything but a
// re-read of a target read before (a new watch, a stopped one, a first
// read, an unreachable datacenter, a new service list) makes the change
// not endpoint-only, so the watches are the last publish's with only the
// named ones' data replaced; the checks below make sure of it.
func (w *Watcher) publishEndpoints(watches map[ServiceKey]*healthWatch, change Change) (Update, bool) {
	last := w.last
	if !change.EndpointsOnly() || last == nil || last.watches != len(watches) {
		return Update{}, false
	}
	services := slices.Clone(last.u.Catalog.Services)
	for _, k := range change.Services {
		hw := watches[k]
		if hw == nil || hw.data == nil || hw.unreachable {
			return Update{}, false
		}
		i, found := slices.BinarySearchFunc(services, k, func(s *Service, k ServiceKey) int {
			return cmp.Or(cmp.Compare(s.Datacenter, k.Datacenter), cmp.Compare(s.Name, k.Name))
		})
		if !found {
			return Update{}, false
		}
		services[i] = hw.data
	}
	u := last.u
	u.Catalog = &Catalog{Services: services}
	u.Pending, u.Unreachable = slices.Clone(u.Pending), slices.Clone(u.Unreachable)
	u.Skipped = nil
	if sk := w.skipped.Load(); sk != nil {
		u.Skipped = slices.Clone(*sk)
	}
	return u, true
}
