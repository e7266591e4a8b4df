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
	got, held := HoldDowngrades(prev, cur)
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
