package consul

import (
	"errors"
	"maps"
	"net/http"

	"github.com/hashicorp/consul/api"
)

// hintFilter keeps the "any" health-state response (the one hint query of a
// budget under statusHintSlots) down to the checks that are not passing,
// which is what a health change adds to or removes from. Consul cannot use
// an index for it: it filters every check in the datacenter.
// Consul 1.15's bexpr cannot select by ModifyIndex, so "what changed" is
// found by diffing responses instead.
const hintFilter = `Status != "passing"`

// checkKey names one check on one node.
type checkKey struct{ Node, CheckID string }

// checkState is what a hint diff compares of a non-passing check.
type checkState struct {
	Status string
	// Service is the check's service name, "" for a node-level check.
	Service string
	// Index is the check's ModifyIndex: the write that put it in this
	// state, which also raised the index of its service (or, for a node
	// check, of every service on the node). It is not compared, as output
	// changes move it without changing health.
	Index uint64
}

// hintSet is one hint query's response: the checks in its state (critical,
// warning), or every check not passing.
type hintSet map[checkKey]checkState

func newHintSet(checks api.HealthChecks) hintSet {
	s := make(hintSet, len(checks))
	for _, c := range checks {
		if c == nil {
			continue
		}
		s[checkKey{c.Node, c.CheckID}] = checkState{Status: c.Status, Service: c.ServiceName, Index: c.ModifyIndex}
	}
	return s
}

func sameCheck(a, b checkState) bool { return a.Status == b.Status && a.Service == b.Service }

func equalHintSets(a, b hintSet) bool { return maps.EqualFunc(a, b, sameCheck) }

// hintPokes says which views a health-state response should hurry, each
// with the index its data must reach to include the change.
type hintPokes struct {
	Services map[string]uint64 // by service name
	Nodes    map[string]uint64 // node-level checks: every service on the node
}

func (p hintPokes) empty() bool { return len(p.Services) == 0 && len(p.Nodes) == 0 }

// diffHints compares two health-state responses and pokes every service
// whose non-passing checks appeared, disappeared or changed status. index
// is cur's response index. A check that is in cur carries the index of the
// write that changed it, which is exactly what its service's view must
// reach; one that left (it passes now, or was deregistered) says no more
// than that the write is at or before index.
func diffHints(prev, cur hintSet, index uint64) hintPokes {
	p := hintPokes{Services: map[string]uint64{}, Nodes: map[string]uint64{}}
	add := func(service, node string, idx uint64) {
		if idx == 0 || idx > index {
			idx = index
		}
		if service == "" {
			p.Nodes[node] = max(p.Nodes[node], idx)
		} else {
			p.Services[service] = max(p.Services[service], idx)
		}
	}
	for k, c := range cur {
		old, ok := prev[k]
		switch {
		case !ok:
			add(c.Service, k.Node, c.Index)
		case !sameCheck(old, c):
			add(c.Service, k.Node, c.Index)
			if old.Service != c.Service {
				add(old.Service, k.Node, index)
			}
		}
	}
	for k, old := range prev {
		if _, ok := cur[k]; !ok {
			add(old.Service, k.Node, index)
		}
	}
	return p
}

// hintUnsupported reports whether the agent rejected the health-state query
// itself (a filter it cannot parse, an endpoint a proxy does not pass), as
// opposed to failing to answer it: retrying would fail forever and, through
// OnQuery, make Consul look down.
func hintUnsupported(err error) bool {
	var se api.StatusError
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	return false
}
