package consul

import (
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// TestACLDefault: Consul's default intention follows its ACL settings.
func TestACLDefault(t *testing.T) {
	for name, tc := range map[string]struct {
		debug map[string]any
		want  ir.IntentionAction
	}{
		"acls off":            {map[string]any{"ACLsEnabled": false, "ACLResolverSettings": map[string]any{"ACLsEnabled": false, "ACLDefaultPolicy": "deny"}}, ir.IntentionAllow},
		"acls on, allow":      {map[string]any{"ACLsEnabled": true, "ACLResolverSettings": map[string]any{"ACLsEnabled": true, "ACLDefaultPolicy": "allow"}}, ir.IntentionAllow},
		"acls on, deny":       {map[string]any{"ACLsEnabled": true, "ACLResolverSettings": map[string]any{"ACLsEnabled": true, "ACLDefaultPolicy": "deny"}}, ir.IntentionDeny},
		"acls on, no policy":  {map[string]any{"ACLsEnabled": true}, ir.IntentionDeny},
		"resolver only, deny": {map[string]any{"ACLResolverSettings": map[string]any{"ACLsEnabled": true, "ACLDefaultPolicy": "deny"}}, ir.IntentionDeny},
	} {
		t.Run(name, func(t *testing.T) {
			if got := aclDefault(map[string]map[string]any{"DebugConfig": tc.debug}); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestNewProxies: only connect-proxy instances, node address fallback,
// destination id defaulting to its name, upstreams sorted by bind port.
func TestNewProxies(t *testing.T) {
	node := &api.Node{Node: "vm-a", Address: "10.0.0.1", Datacenter: "dc1"}
	entries := []*api.ServiceEntry{
		{Node: node, Service: &api.AgentService{ID: "web-1", Service: "web", Port: 80}},
		{Node: node, Service: &api.AgentService{Kind: api.ServiceKindConnectProxy, ID: "web-sidecar-proxy", Service: "web-sidecar-proxy", Port: 21000,
			Proxy: &api.AgentServiceConnectProxyConfig{DestinationServiceName: "web", LocalServicePort: 80, Config: map[string]any{"protocol": "http"},
				Upstreams: []api.Upstream{{DestinationName: "db", LocalBindPort: 9300}, {DestinationName: "api", LocalBindPort: 9191, Datacenter: "dc2"}}}},
			Checks: api.HealthChecks{{CheckID: "serfHealth", Status: api.HealthPassing}, {CheckID: "s", Status: api.HealthCritical}}},
		nil,
	}
	ps := NewProxies(entries)
	if len(ps) != 1 {
		t.Fatalf("proxies = %+v", ps)
	}
	p := ps[0]
	if p.Address != "10.0.0.1" || p.ServiceAddress != "" || p.ServiceID != "web" || p.Protocol != "http" || p.Status != StatusCritical {
		t.Errorf("proxy = %+v", p)
	}
	if len(p.Upstreams) != 2 || p.Upstreams[0].Service != "api" || p.Upstreams[0].Datacenter != "dc2" || p.Upstreams[1].BindPort != 9300 {
		t.Errorf("upstreams = %+v", p.Upstreams)
	}
}
