package consul

import (
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"
)

// TestGatewayRegistrations: gateway instances of /v1/health/service are
// kept with their kind, address and port (and no destination), beside
// sidecars; a registered mesh gateway makes the watcher follow every
// local service's Connect endpoints, which it routes to; the linked
// services of a registered terminating gateway are listed from its
// entry, the wildcard left out.
func TestGatewayRegistrations(t *testing.T) {
	node := &api.Node{Node: "vm-c", Address: "10.0.0.3", Datacenter: "dc1"}
	ps := NewProxies([]*api.ServiceEntry{
		{Node: node, Service: &api.AgentService{Kind: api.ServiceKindTerminatingGateway, ID: "tgw-1", Service: "tgw", Port: 9443}},
		{Node: node, Service: &api.AgentService{Kind: api.ServiceKindMeshGateway, ID: "mgw-1", Service: "mgw", Address: "10.0.0.9", Port: 8443}},
		{Node: node, Service: &api.AgentService{Kind: api.ServiceKindIngressGateway, ID: "igw", Service: "igw", Port: 8080}},
	})
	if len(ps) != 2 {
		t.Fatalf("proxies %+v, want the two gateways (ingress is not served)", ps)
	}
	mgw, tgw := ps[0], ps[1]
	if mgw.Kind != KindMeshGateway || mgw.Address != "10.0.0.9" || mgw.ServiceAddress != "10.0.0.9" || mgw.Port != 8443 || mgw.Service != "" {
		t.Errorf("mesh gateway %+v", mgw)
	}
	if tgw.Kind != KindTerminatingGateway || tgw.Address != "10.0.0.3" || tgw.ServiceAddress != "" || tgw.Port != 9443 {
		t.Errorf("terminating gateway %+v", tgw)
	}
	m := &Mesh{Proxies: []Proxy{{ID: "web-sidecar-proxy", Name: "web-sidecar-proxy", Service: "web", Node: "vm-a"}, tgw}, Natives: []string{"grpc"}}
	if got := m.Services(); !slices.Equal(got, []ServiceKey{{Name: "grpc"}, {Name: "web"}}) {
		t.Errorf("services %v: a gateway fronts no destination", got)
	}
	if got := m.TransparentTargets(); got != nil {
		t.Errorf("without a mesh gateway or transparent proxy: %v", got)
	}
	m.Proxies = append(m.Proxies, mgw)
	if got := m.TransparentTargets(); !slices.Equal(got, []ServiceKey{{Name: "grpc"}, {Name: "web"}}) {
		t.Errorf("with a mesh gateway: %v", got)
	}
	m.SetEntries([]api.ConfigEntry{&api.TerminatingGatewayConfigEntry{Kind: api.TerminatingGateway, Name: "tgw", Services: []api.LinkedService{{Name: "ext2"}, {Name: "*"}, {Name: "ext1", CAFile: "/ca.pem"}}}})
	if got := m.LinkedServices(); !slices.Equal(got, []string{"ext1", "ext2"}) {
		t.Errorf("linked services %v", got)
	}
	if got := m.TerminatingGateways["tgw"]; len(got) != 3 || got[1] != (LinkedService{Name: "ext1", CAFile: "/ca.pem"}) {
		t.Errorf("links %+v", got)
	}
}
