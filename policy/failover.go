package policy

import (
	"slices"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// failover reads a failover block of service s: the service's own
// (subset "", Consul's Failover["*"]) or a subset's. Its targets are
// either listed (target blocks) or made as Consul makes them from
// service, subset and datacenters: one per datacenter (the local one
// without a list). A "*" failover to the service's own sidecars in
// other datacenters stays FailoverDatacenters: one cluster, a priority
// per datacenter, which every consumer of the policy reads.
func (r *resolver) failover(f *failoverBlock, s *Service, subset string) {
	if len(f.Targets) > 0 {
		if f.Service != nil || f.Subset != nil || len(f.Datacenters) > 0 {
			r.add(f.DefRange, "Conflicting failover", "a failover lists target blocks or names service, subset and datacenters, not both: move them into target blocks.")
			return
		}
		var out []FailoverTarget
		for _, tb := range f.Targets {
			t := FailoverTarget{}
			set(&t.Service, tb.Service)
			set(&t.Subset, tb.Subset)
			set(&t.Datacenter, tb.Datacenter)
			r.failoverNames(tb.Body, tb.DefRange, t)
			if t == (FailoverTarget{}) || t == (FailoverTarget{Subset: subset}) {
				r.add(tb.DefRange, "Invalid failover target", "this target is the failing one itself; name another service, subset or datacenter.")
			}
			out = append(out, t)
		}
		s.setFailover(subset, out)
		return
	}
	var service, sub string
	set(&service, f.Service)
	set(&sub, f.Subset)
	r.failoverNames(f.Body, f.DefRange, FailoverTarget{Service: service, Subset: sub})
	if service == "" && sub == "" && len(f.Datacenters) == 0 {
		r.add(valueRange(f.Body, "datacenters", f.DefRange), "Empty failover", "failover needs somewhere to go: list datacenters in order, e.g. datacenters = [\"dc2\"], name a service or subset, or remove the failover block.")
		return
	}
	own := service == "" && (sub == "" || sub == subset)
	seen := map[string]bool{}
	for i, dc := range f.Datacenters {
		if dc == "" || seen[dc] || own && dc == s.Datacenter {
			r.add(elemRange(f.Body, "datacenters", i, f.DefRange), "Invalid failover datacenter", "datacenter %q is empty, repeated, or the service's own datacenter; list each other datacenter once.", dc)
		}
		seen[dc] = true
	}
	if own && subset == "" && sub == "" {
		s.FailoverDatacenters = f.Datacenters
		return
	}
	dcs := f.Datacenters
	if len(dcs) == 0 {
		dcs = []string{""}
	}
	out := make([]FailoverTarget, len(dcs))
	for i, dc := range dcs {
		out[i] = FailoverTarget{Service: service, Subset: sub, Datacenter: dc}
	}
	s.setFailover(subset, out)
}

// failoverNames checks the names a failover target gives.
func (r *resolver) failoverNames(body hcl.Body, def hcl.Range, t FailoverTarget) {
	if t.Service != "" && !ir.QueryableServiceName(t.Service) {
		r.add(valueRange(body, "service", def), "Invalid service name", unqueryable, t.Service)
	}
	if t.Subset != "" && !subsetName.MatchString(t.Subset) {
		r.add(valueRange(body, "subset", def), "Invalid subset name", "subset %q: use letters, digits, '-' and '_' only.", t.Subset)
	}
}

func (s *Service) setFailover(subset string, targets []FailoverTarget) {
	if s.Failover == nil {
		s.Failover = map[string][]FailoverTarget{}
	}
	s.Failover[subset] = slices.Clip(targets)
}

// FailoverFor is where a target of s (subset "" for all of it) fails
// over to, resolved to names: Consul's Failover[subset], else its "*".
// Nil when it fails over only by datacenter priorities (or not at all).
func (s *Service) FailoverFor(subset string) []FailoverTarget {
	ts, ok := s.Failover[subset]
	if !ok || subset == "" {
		ts = s.Failover[""]
	}
	out := make([]FailoverTarget, len(ts))
	for i, t := range ts {
		out[i] = t
		if t.Service == "" {
			out[i].Service = s.ConsulName
			if t.Subset == "" {
				// The same service elsewhere: the same subset there.
				out[i].Subset = subset
			}
		}
		if t.Datacenter == "" {
			out[i].Datacenter = s.Datacenter
		}
	}
	return out
}
