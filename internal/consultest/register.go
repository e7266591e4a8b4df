package consultest

import (
	"testing"

	"github.com/hashicorp/consul/api"
)

// RegisterTTL registers a service instance at 127.0.0.1:port on the agent,
// with one TTL check "service:"+id (TTL 10m, long enough never to lapse in a
// test) that is passing from the start. Use [Agent.SetTTL] to change it.
func (a *Agent) RegisterTTL(t testing.TB, service, id string, port int, tags []string, meta map[string]string) {
	t.Helper()
	reg := &api.AgentServiceRegistration{
		ID:      id,
		Name:    service,
		Address: "127.0.0.1",
		Port:    port,
		Tags:    tags,
		Meta:    meta,
		Check: &api.AgentServiceCheck{
			CheckID: "service:" + id,
			TTL:     "10m",
			// Passing in the registration itself, so a watcher never sees the
			// instance as critical first.
			Status: api.HealthPassing,
		},
	}
	if err := a.client.Agent().ServiceRegister(reg); err != nil {
		t.Fatalf("consultest: register %s/%s: %v", service, id, err)
	}
}

// SetTTL sets the status of TTL check checkID: "passing", "warning" or
// "critical".
func (a *Agent) SetTTL(t testing.TB, checkID, status string) {
	t.Helper()
	if err := a.client.Agent().UpdateTTL(checkID, "set by consultest", status); err != nil {
		t.Fatalf("consultest: set %s to %s: %v", checkID, status, err)
	}
}

// Deregister removes service instance id, and its checks, from the agent.
func (a *Agent) Deregister(t testing.TB, id string) {
	t.Helper()
	if err := a.client.Agent().ServiceDeregister(id); err != nil {
		t.Fatalf("consultest: deregister %s: %v", id, err)
	}
}
