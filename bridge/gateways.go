package bridge

import (
	"cmp"
	"slices"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// Gateways in the daemon: the mesh watcher lists gateway registrations
// with the sidecars; the config-entry watcher brings terminating-gateway
// entries (meshKinds). What they link joins the catalog watcher's targets
// (the gateway's endpoints) and, in central mode, the mesh watcher's
// leaves (the gateway's certificates); the gateways join the sidecars'
// index, keyed by service id as Consul keys them.

// linkedServices are the services linked to registered terminating
// gateways, with the entries the loop holds joined to the watcher's
// registrations.
func (s *meshState) linkedServices() []string {
	if s.mesh == nil {
		return nil
	}
	m := *s.mesh
	m.TerminatingGateways = s.terminating
	return m.LinkedServices()
}

// followLeaves tells the mesh watcher what the entries add to what it
// follows: in central mode the linked services' leaves (the per-VM agent
// serves leaves otherwise), and with a mesh gateway their Connect
// endpoints (meshTargets).
func (l *loop) followLeaves() {
	if l.meshWatcher == nil {
		return
	}
	if l.mesh.central {
		l.meshWatcher.SetLeafServices(l.mesh.linkedServices())
	}
	l.setMeshTargets(l.policy)
}

// setMeshTargets gives the mesh watcher the services it follows besides
// the registrations' upstreams: the policy's mesh_routes targets (which
// no sidecar may dial directly) and, with a mesh gateway, the services
// linked to terminating gateways. Only a change is passed on: the
// watcher publishes after each, and each publication comes back here.
func (l *loop) setMeshTargets(p *policy.Policy) {
	if l.meshWatcher == nil {
		return
	}
	t := model.MeshWatchTargets(p)
	if l.mesh.mesh != nil {
		m := *l.mesh.mesh
		m.TerminatingGateways = l.mesh.terminating
		t = append(t, m.MeshGatewayTargets()...)
	}
	if l.meshTargetsSet && slices.Equal(t, l.meshTargets) {
		return
	}
	l.meshTargets, l.meshTargetsSet = t, true
	l.meshWatcher.SetTargets(t)
}

// gatewayIndex adds the gateway groups of m to a sidecar index: serve
// keys their Envoys by node id like a sidecar's and /v1/proxies shows
// their kind and, as upstreams, the services they front.
func gatewayIndex(m *ir.Model, idx map[string][]serve.SidecarInfo) {
	for _, g := range m.Groups {
		gw := g.Gateway
		if gw == nil {
			continue
		}
		info := serve.SidecarInfo{Node: gw.Node, Service: gw.Service, Kind: gw.Kind}
		for _, c := range gw.Chains {
			// A chain of another datacenter fronts that datacenter's gateways.
			info.Upstreams = append(info.Upstreams, cmp.Or(c.Service, "datacenter "+c.Datacenter)+"@"+c.SNI)
		}
		idx[gw.ProxyID] = append(idx[gw.ProxyID], info)
	}
}
