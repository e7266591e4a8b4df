package model

import (
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
