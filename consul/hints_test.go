package consul

import (
	"fmt"
	"maps"
	"net/http"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
)

func TestDiffHints(t *testing.T) {
	web1 := checkKey{"n1", "service:web-1"}
	web2 := checkKey{"n2", "service:web-2"}
	api1 := checkKey{"n1", "service:api-1"}
	serf1 := checkKey{"n1", "serfHealth"}
	none := map[string]uint64{}
	tests := map[string]struct {
		prev, cur hintSet
		index     uint64
		services  map[string]uint64
		nodes     map[string]uint64
	}{
		"unchanged": {
			prev:  hintSet{web1: {"critical", "web", 10}, serf1: {"critical", "", 11}},
			cur:   hintSet{web1: {"critical", "web", 10}, serf1: {"critical", "", 11}},
			index: 20, services: none, nodes: none,
		},
		"both empty": {prev: hintSet{}, cur: hintSet{}, index: 20, services: none, nodes: none},
		"output change only": {
			// A non-passing check's output moves its ModifyIndex, not its health.
			prev:  hintSet{web1: {"critical", "web", 10}},
			cur:   hintSet{web1: {"critical", "web", 15}},
			index: 20, services: none, nodes: none,
		},
		"added": {
			prev:     hintSet{},
			cur:      hintSet{web1: {"critical", "web", 17}},
			index:    20,
			services: map[string]uint64{"web": 17}, nodes: none,
		},
		"removed": {
			// Passing again, or deregistered: when is not in the response.
			prev:     hintSet{web1: {"critical", "web", 17}},
			cur:      hintSet{},
			index:    20,
			services: map[string]uint64{"web": 20}, nodes: none,
		},
		"status change": {
			prev:     hintSet{web1: {"warning", "web", 12}, api1: {"critical", "api", 13}},
			cur:      hintSet{web1: {"critical", "web", 18}, api1: {"critical", "api", 13}},
			index:    20,
			services: map[string]uint64{"web": 18}, nodes: none,
		},
		"node-level check": {
			prev:     hintSet{web1: {"critical", "web", 12}},
			cur:      hintSet{web1: {"critical", "web", 12}, serf1: {"critical", "", 19}},
			index:    20,
			services: none, nodes: map[string]uint64{"n1": 19},
		},
		"node-level check gone": {
			prev:     hintSet{serf1: {"critical", "", 19}},
			cur:      hintSet{},
			index:    25,
			services: none, nodes: map[string]uint64{"n1": 25},
		},
		"several changes of one service take the latest": {
			prev:     hintSet{web2: {"critical", "web", 5}},
			cur:      hintSet{web1: {"critical", "web", 17}},
			index:    20,
			services: map[string]uint64{"web": 20}, nodes: none,
		},
		"check moved to another service": {
			prev:     hintSet{web1: {"critical", "web", 5}},
			cur:      hintSet{web1: {"critical", "api", 16}},
			index:    20,
			services: map[string]uint64{"web": 20, "api": 16}, nodes: none,
		},
		"implausible check index falls back to the response's": {
			prev:     hintSet{},
			cur:      hintSet{web1: {"critical", "web", 0}, api1: {"warning", "api", 99}},
			index:    20,
			services: map[string]uint64{"web": 20, "api": 20}, nodes: none,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := diffHints(tc.prev, tc.cur, tc.index)
			if !maps.Equal(p.Services, tc.services) || !maps.Equal(p.Nodes, tc.nodes) {
				t.Fatalf("services %v nodes %v, want services %v nodes %v", p.Services, p.Nodes, tc.services, tc.nodes)
			}
			if p.empty() != (len(tc.services) == 0 && len(tc.nodes) == 0) {
				t.Fatalf("empty() = %v", p.empty())
			}
		})
	}
}

func TestNewHintSetAndEquality(t *testing.T) {
	a := newHintSet(api.HealthChecks{
		{Node: "n1", CheckID: "service:web-1", Status: "critical", ServiceName: "web", ModifyIndex: 7},
		nil,
		{Node: "n1", CheckID: "serfHealth", Status: "critical", ModifyIndex: 8},
	})
	want := hintSet{{"n1", "service:web-1"}: {"critical", "web", 7}, {"n1", "serfHealth"}: {"critical", "", 8}}
	if !maps.Equal(a, want) {
		t.Fatalf("newHintSet = %v, want %v", a, want)
	}
	b := maps.Clone(a)
	b[checkKey{"n1", "serfHealth"}] = checkState{"critical", "", 30}
	if !equalHintSets(a, b) {
		t.Fatal("sets that differ only in ModifyIndex are unequal: every output change would be news")
	}
	b[checkKey{"n1", "serfHealth"}] = checkState{"warning", "", 30}
	if equalHintSets(a, b) {
		t.Fatal("a status change compares equal")
	}
}

func TestHintUnsupported(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{api.StatusError{Code: http.StatusBadRequest, Body: "Failed to create boolean expression evaluator"}, true},
		{api.StatusError{Code: http.StatusNotFound}, true},
		{api.StatusError{Code: http.StatusInternalServerError, Body: "No cluster leader"}, false},
		{api.StatusError{Code: http.StatusTooManyRequests}, false},
		{api.StatusError{Code: http.StatusForbidden}, false},
		{http.ErrHandlerTimeout, false},
	} {
		if got := hintUnsupported(tc.err); got != tc.want {
			t.Errorf("hintUnsupported(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestWatcherPokeReachesLocalViews(t *testing.T) {
	w := NewWatcher(Config{Query: QueryOptions{Datacenter: "dc1"}, Logger: zerolog.Nop()})
	svc := func(name, dc string, nodes ...string) *Service {
		s := &Service{Name: name, Datacenter: dc, Instances: []Instance{}}
		for i, n := range nodes {
			s.Instances = append(s.Instances, Instance{ID: fmt.Sprintf("%s-%d", name, i), Node: n})
		}
		return s
	}
	keys := map[string]ServiceKey{
		"web":     {Name: "web"},
		"web@dc1": {Datacenter: "dc1", Name: "web"}, // the local datacenter by name
		"web@dc2": {Datacenter: "dc2", Name: "web"}, // remote: hints never reach it
		"api":     {Name: "api"},
		"db":      {Name: "db"}, // never read yet
		"cache":   {Name: "cache"},
	}
	data := map[string]*Service{
		"web": svc("web", "", "n1"), "web@dc1": svc("web", "dc1", "n1"), "web@dc2": svc("web", "dc2", "n1", "n2"),
		"api": svc("api", "", "n2", "n3"), "cache": svc("cache", "", "n3"),
	}
	watches := map[ServiceKey]*healthWatch{}
	for id, k := range keys {
		watches[k] = &healthWatch{slots: w.slots.join(id, false), data: data[id]}
	}
	hinted := func() map[string]uint64 {
		out := map[string]uint64{}
		for id, k := range keys {
			if m := watches[k].slots; m.hinted != 0 {
				out[id] = m.hinted
			}
			watches[k].slots.hinted = 0
		}
		return out
	}

	w.poke(watches, &hintPokes{Services: map[string]uint64{"web": 10, "db": 11, "gone": 12}})
	if got, want := hinted(), map[string]uint64{"web": 10, "web@dc1": 10, "db": 11}; !maps.Equal(got, want) {
		t.Fatalf("service hints reached %v, want %v", got, want)
	}
	// A node-level check: every local service with an instance on the node.
	w.poke(watches, &hintPokes{Nodes: map[string]uint64{"n2": 20, "n9": 21}})
	if got, want := hinted(), map[string]uint64{"api": 20}; !maps.Equal(got, want) {
		t.Fatalf("node n2's hint reached %v, want %v", got, want)
	}
	w.poke(watches, &hintPokes{Nodes: map[string]uint64{"n1": 30, "n3": 31}})
	if got, want := hinted(), map[string]uint64{"web": 30, "web@dc1": 30, "api": 31, "cache": 31}; !maps.Equal(got, want) {
		t.Fatalf("nodes n1 and n3's hints reached %v, want %v", got, want)
	}
}
