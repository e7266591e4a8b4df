package bridge

import (
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
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

// followLeaves tells the mesh watcher, in central mode, which linked
// services' leaves to follow (no-op otherwise: the per-VM agent serves
// leaves from its local Consul agent).
func (l *loop) followLeaves() {
	if l.meshWatcher == nil || !l.mesh.central {
		return
	}
	l.meshWatcher.SetLeafServices(l.mesh.linkedServices())
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
			info.Upstreams = append(info.Upstreams, c.Service+"@"+c.SNI)
		}
		idx[gw.ProxyID] = append(idx[gw.ProxyID], info)
	}
}
