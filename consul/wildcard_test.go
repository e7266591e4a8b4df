package consul

import (
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"
)

// TestExpandWildcards: a terminating-gateway entry with a wildcard link is
// handed on linking what Consul expanded it to (its TLS files per
// service, ingress-gateway rows ignored), once that is read; the entry
// itself is not modified, and other entries pass unchanged.
func TestExpandWildcards(t *testing.T) {
	wild := &api.TerminatingGatewayConfigEntry{Kind: api.TerminatingGateway, Name: "tgw", Services: []api.LinkedService{{Name: "*"}, {Name: "ext2", SNI: "ext2.example.com"}}}
	named := &api.TerminatingGatewayConfigEntry{Kind: api.TerminatingGateway, Name: "tgw2", Services: []api.LinkedService{{Name: "db"}}}
	defaults := &api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "ext1", Protocol: "http"}
	entries := []api.ConfigEntry{wild, named, defaults}
	if got := wildcardGateways(entries); !slices.Equal(got, []string{"tgw"}) {
		t.Fatalf("wildcard gateways %v, want [tgw]", got)
	}
	if got := expandWildcards(entries, map[string][]*api.GatewayService{}); got[0] != wild {
		t.Errorf("not read yet: the entry must keep its wildcard, got %+v", got[0])
	}
	gs := []*api.GatewayService{
		{Gateway: api.CompoundServiceName{Name: "tgw"}, Service: api.CompoundServiceName{Name: "ext1"}, GatewayKind: api.ServiceKindTerminatingGateway, FromWildcard: true},
		{Gateway: api.CompoundServiceName{Name: "tgw"}, Service: api.CompoundServiceName{Name: "ext2"}, GatewayKind: api.ServiceKindTerminatingGateway, SNI: "ext2.example.com", CAFile: "/ca.pem"},
		{Gateway: api.CompoundServiceName{Name: "tgw"}, Service: api.CompoundServiceName{Name: "web"}, GatewayKind: api.ServiceKindIngressGateway},
	}
	got := expandWildcards(entries, map[string][]*api.GatewayService{"tgw": gs})
	want := []api.LinkedService{{Name: "ext1"}, {Name: "ext2", SNI: "ext2.example.com", CAFile: "/ca.pem"}}
	if tg, ok := got[0].(*api.TerminatingGatewayConfigEntry); !ok || tg.Name != "tgw" || !slices.Equal(tg.Services, want) {
		t.Errorf("expanded entry %+v, want links %+v", got[0], want)
	}
	if got[1] != named || got[2] != defaults {
		t.Errorf("other entries changed: %+v %+v", got[1], got[2])
	}
	if len(wild.Services) != 2 || wild.Services[0].Name != "*" {
		t.Errorf("the watcher's own entry was modified: %+v", wild.Services)
	}
}
