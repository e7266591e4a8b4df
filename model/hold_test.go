package model

import (
	"slices"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
)

func TestHoldDowngrades(t *testing.T) {
	svc := func(statuses ...consul.Status) *consul.Service {
		s := &consul.Service{Name: "web"}
		for i, st := range statuses {
			s.Instances = append(s.Instances, consul.Instance{ID: string(rune('a' + i)), Node: "n", Status: st})
		}
		return s
	}
	prev := consul.NewCatalog([]*consul.Service{svc(consul.StatusPassing, consul.StatusCritical, consul.StatusWarning)})
	cur := consul.NewCatalog([]*consul.Service{
		svc(consul.StatusCritical, consul.StatusPassing, consul.StatusMaintenance, consul.StatusCritical),
		{Name: "new", Instances: []consul.Instance{{ID: "x", Status: consul.StatusCritical}}},
	})
	all := func(string) bool { return true }
	got, held := HoldDowngrades(prev, cur, all)
	if held != 2 {
		t.Fatalf("held %d downgrades, want 2", held)
	}
	var statuses []consul.Status
	for _, in := range got.Service("", "web").Instances {
		statuses = append(statuses, in.Status)
	}
	want := []consul.Status{consul.StatusPassing, consul.StatusPassing, consul.StatusWarning, consul.StatusCritical}
	for i := range want {
		if statuses[i] != want[i] {
			t.Fatalf("statuses = %v, want %v (a held, b improved, c held, d new)", statuses, want)
		}
	}
	if got.Service("", "new").Instances[0].Status != consul.StatusCritical {
		t.Fatal("a new service's status was changed")
	}
	if cur.Service("", "web").Instances[0].Status != consul.StatusCritical {
		t.Fatal("HoldDowngrades modified its input")
	}
}

// TestHoldDowngradesPerDatacenter: only the services of a held datacenter
// keep their old health; a downgrade in another one passes at once.
func TestHoldDowngradesPerDatacenter(t *testing.T) {
	svc := func(dc string, st consul.Status) *consul.Service {
		return &consul.Service{Name: "web", Datacenter: dc, Instances: []consul.Instance{{ID: "a", Node: "n", Datacenter: dc, Status: st}}}
	}
	prev := consul.NewCatalog([]*consul.Service{svc("", consul.StatusPassing), svc("dc2", consul.StatusPassing)})
	cur := consul.NewCatalog([]*consul.Service{svc("", consul.StatusCritical), svc("dc2", consul.StatusCritical)})
	got, held := HoldDowngrades(prev, cur, func(dc string) bool { return dc == "dc2" })
	if held != 1 {
		t.Fatalf("held %d downgrades, want 1 (dc2's)", held)
	}
	if st := got.Service("", "web").Instances[0].Status; st != consul.StatusCritical {
		t.Errorf("local instance %s, want critical: the local datacenter was not out", st)
	}
	if st := got.Service("dc2", "web").Instances[0].Status; st != consul.StatusPassing {
		t.Errorf("dc2 instance %s, want its held passing", st)
	}
}

// TestHoldDowngradesKeepsRemovals: in a held datacenter an instance that
// is gone, or a whole service, is kept as it was (a restarted Consul
// without its state answers with an empty catalog until its agents
// register again); the result stays sorted, so lookups find what was kept;
// in another datacenter a removal passes.
func TestHoldDowngradesKeepsRemovals(t *testing.T) {
	in := func(id string, st consul.Status) consul.Instance {
		return consul.Instance{ID: id, Node: "n", Status: st}
	}
	prev := consul.NewCatalog([]*consul.Service{
		{Name: "api", Instances: []consul.Instance{in("a", consul.StatusPassing), in("b", consul.StatusPassing), in("c", consul.StatusWarning)}},
		{Name: "carts", Instances: []consul.Instance{in("x", consul.StatusPassing)}},
		{Name: "carts", Datacenter: "dc2", Instances: []consul.Instance{in("y", consul.StatusPassing)}},
		{Name: "web", Instances: []consul.Instance{in("w", consul.StatusPassing)}},
	})
	cur := consul.NewCatalog([]*consul.Service{
		{Name: "api", Instances: []consul.Instance{in("b", consul.StatusCritical), in("d", consul.StatusCritical)}},
		{Name: "web", Instances: []consul.Instance{in("w", consul.StatusPassing)}},
	})
	got, held := HoldDowngrades(prev, cur, func(dc string) bool { return dc == "" })
	// api: a and c kept, b's downgrade held; carts: the service, one instance.
	if held != 4 {
		t.Errorf("held %d, want 4 (api's a, b and c, carts' x)", held)
	}
	var ids []string
	for _, i := range got.Service("", "api").Instances {
		ids = append(ids, i.ID+":"+string(i.Status))
	}
	want := []string{"a:passing", "b:passing", "c:warning", "d:critical"}
	if !slices.Equal(ids, want) {
		t.Errorf("api instances %v, want %v (removals kept, in order; the new one as it is)", ids, want)
	}
	if s := got.Service("", "carts"); s == nil || len(s.Instances) != 1 || s.Instances[0].ID != "x" {
		t.Errorf("the vanished local service carts is %+v, want it kept with its instance", s)
	}
	if s := got.Service("dc2", "carts"); s != nil {
		t.Errorf("dc2's carts, whose datacenter is not held, is kept: %+v", s)
	}
	if got.Service("", "web") != cur.Service("", "web") {
		t.Error("an unchanged service was copied")
	}
	if len(cur.Service("", "api").Instances) != 2 || cur.Service("", "carts") != nil {
		t.Error("HoldDowngrades modified its input")
	}
}
