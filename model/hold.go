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

// holdInstances is s with old's status for each instance that got worse
// and old's instances that s lacks, and how many it held; s itself when
// none.
func holdInstances(old, s *consul.Service) (*consul.Service, int) {
	type id [2]string
	before := make(map[id]consul.Status, len(old.Instances))
	for _, in := range old.Instances {
		before[id{in.Node, in.ID}] = in.Status
	}
	now := make(map[id]bool, len(s.Instances))
	var copied *consul.Service
	count := 0
	for i, in := range s.Instances {
		now[id{in.Node, in.ID}] = true
		st, ok := before[id{in.Node, in.ID}]
		if !ok || !in.Status.WorseThan(st) {
			continue
		}
		if copied == nil {
			copied = copyService(s)
		}
		copied.Instances[i].Status = st
		count++
	}
	removed := 0
	for _, in := range old.Instances {
		if now[id{in.Node, in.ID}] {
			continue
		}
		if copied == nil {
			copied = copyService(s)
		}
		copied.Instances = append(copied.Instances, in)
		removed++
	}
	if copied == nil {
		return s, 0
	}
	if removed > 0 {
		// The order NewService gives, so equal data compares equal.
		slices.SortFunc(copied.Instances, func(a, b consul.Instance) int {
			return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID))
		})
	}
	return copied, count + removed
}

func copyService(s *consul.Service) *consul.Service {
	c := *s
	c.Instances = append([]consul.Instance(nil), s.Instances...)
	return &c
}
