package model

import (
	"cmp"
	"slices"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
)

// HoldDowngrades returns cur with every instance that prev also has, and
// that got worse since, at its status in prev, for the services of the
// datacenters held says (a service's Datacenter: "" or a name). It serves
// the window after a datacenter's Consul comes back from an outage: a
// restarted agent reports every non-TTL check critical until the check
// has run once, and pushing that would take healthy instances out of
// every proxy for a few seconds.
//
// Removals are downgrades too: an instance or a whole service that prev
// has and cur lacks is kept as prev had it. A Consul server that restarts
// without its state (a dev agent; a cluster restored from an older
// snapshot: the index goes backwards) answers with an empty catalog until
// its agents register their services again, which took a service out of
// every proxy in TestConsulServerRestart. A real deregistration in the
// window therefore reaches proxies when the window ends, as a real
// failure does. Connect's sidecars, gateways and endpoints are held the
// same way (holdmesh.go). New instances and improvements pass through
// unchanged, and so does everything of other datacenters. The count is what was
// held (a vanished service counts at least one). It is pure; prev and cur
// are not modified.
func HoldDowngrades(prev, cur *consul.Catalog, held func(datacenter string) bool) (*consul.Catalog, int) {
	if prev == nil || cur == nil {
		return cur, 0
	}
	count := 0
	services := make([]*consul.Service, 0, len(cur.Services))
	for _, s := range cur.Services {
		old := prev.Service(s.Datacenter, s.Name)
		if old == nil || !held(s.Datacenter) {
			services = append(services, s)
			continue
		}
		h, n := holdInstances(old, s)
		services = append(services, h)
		count += n
	}
	vanished := false
	for _, s := range prev.Services {
		if held(s.Datacenter) && cur.Service(s.Datacenter, s.Name) == nil {
			services = append(services, s)
			count += max(1, len(s.Instances))
			vanished = true
		}
	}
	if vanished {
		// Service looks services up by (Datacenter, Name) in order.
		slices.SortFunc(services, func(a, b *consul.Service) int {
			return cmp.Or(cmp.Compare(a.Datacenter, b.Datacenter), cmp.Compare(a.Name, b.Name))
		})
	}
	mesh, n := holdMesh(prev.Mesh, cur.Mesh, held)
	return &consul.Catalog{Services: services, Mesh: mesh}, count + n
}

// holdInstances is s with its instances held against old's (holdList),
// and how many it held; s itself when none.
func holdInstances(old, s *consul.Service) (*consul.Service, int) {
	ins, n := holdList(old.Instances, s.Instances, func(consul.Instance) bool { return true },
		func(in consul.Instance) [2]string { return [2]string{in.Node, in.ID} },
		func(in *consul.Instance) *consul.Status { return &in.Status })
	if n == 0 {
		return s, 0
	}
	c := *s
	c.Instances = ins
	return &c, n
}

// holdList is cur with each item that keep says is held and that got
// worse since prev at its status in prev, and those prev has and cur
// lacks added back, sorted by id ((Node, ID): the order the watchers
// give, so equal data compares equal), and how many it held; cur itself
// when none. cur is not modified.
func holdList[T any](prev, cur []T, keep func(T) bool, id func(T) [2]string, status func(*T) *consul.Status) ([]T, int) {
	before := make(map[[2]string]T, len(prev))
	for _, p := range prev {
		if keep(p) {
			before[id(p)] = p
		}
	}
	if len(before) == 0 {
		return cur, 0
	}
	var out []T
	count := 0
	now := make(map[[2]string]bool, len(cur))
	for i, c := range cur {
		now[id(c)] = true
		old, ok := before[id(c)]
		if !ok || !status(&c).WorseThan(*status(&old)) {
			continue
		}
		if out == nil {
			out = slices.Clone(cur)
		}
		*status(&out[i]) = *status(&old)
		count++
	}
	removed := false
	for _, p := range prev {
		if _, ok := before[id(p)]; !ok || now[id(p)] {
			continue
		}
		if out == nil {
			out = slices.Clone(cur)
		}
		out = append(out, p)
		count++
		removed = true
	}
	if out == nil {
		return cur, 0
	}
	if removed {
		slices.SortFunc(out, func(a, b T) int {
			ia, ib := id(a), id(b)
			return cmp.Or(cmp.Compare(ia[0], ib[0]), cmp.Compare(ia[1], ib[1]))
		})
	}
	return out, count
}
