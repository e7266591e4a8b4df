package model

import (
	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
)

// HoldDowngrades returns cur with every instance that prev also has, and
// that got worse since, at its status in prev, for the services of the
// datacenters held says (a service's Datacenter: "" or a name). It serves
// the window after a datacenter's Consul comes back from an outage: a
// restarted agent reports every non-TTL check critical until the check
// has run once, and pushing that would take healthy instances out of
// every proxy for a few seconds. Other datacenters, new instances,
// removals and improvements pass through unchanged. It is pure; prev and
// cur are not modified.
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
		before := map[[2]string]consul.Status{}
		for _, in := range old.Instances {
			before[[2]string{in.Node, in.ID}] = in.Status
		}
		var copied *consul.Service
		for i, in := range s.Instances {
			st, ok := before[[2]string{in.Node, in.ID}]
			if !ok || !in.Status.WorseThan(st) {
				continue
			}
			if copied == nil {
				c := *s
				c.Instances = append([]consul.Instance(nil), s.Instances...)
				copied = &c
			}
			copied.Instances[i].Status = st
			count++
		}
		if copied != nil {
			services = append(services, copied)
		} else {
			services = append(services, s)
		}
	}
	// Services keep cur's order, which is already sorted.
	return &consul.Catalog{Services: services, Mesh: cur.Mesh}, count
}
