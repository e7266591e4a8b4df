package consul

import (
	"maps"
	"slices"

	"github.com/hashicorp/consul/api"
)

// Transparent proxies (proxy.mode = "transparent"): applications dial a
// service's Consul virtual IP and the sidecar's outbound listener matches
// it. Consul 1.15 assigns each service in the mesh a virtual IP from
// 240.0.0.0/4 and reports it as the tagged address "consul-virtual" of
// the service's Connect endpoints (/v1/health/connect/SERVICE), which the
// mesh watcher reads for every upstream.

// VirtualIPTag is the tagged address holding a service's virtual IP.
const VirtualIPTag = "consul-virtual"

// ProxyModeTransparent is proxy.mode of a transparent proxy.
const ProxyModeTransparent = string(api.ProxyModeTransparent)

// Transparent reports whether p is registered as a transparent proxy.
func (p Proxy) Transparent() bool { return p.Mode == ProxyModeTransparent }

// TransparentTargets are the services a transparent proxy may reach
// without naming them: every local service fronted by a registered
// sidecar (or Connect-native), when at least one proxy is transparent or
// a mesh gateway is registered (which routes to each of them); nil
// otherwise. The mesh watcher follows their Connect endpoints, which
// carry the virtual IPs.
func (m *Mesh) TransparentTargets() []ServiceKey {
	if m == nil || !slices.ContainsFunc(m.Proxies, func(p Proxy) bool { return p.Transparent() || p.Kind == KindMeshGateway }) {
		return nil
	}
	set := map[ServiceKey]bool{}
	for _, p := range m.Proxies {
		if !p.IsGateway() {
			set[ServiceKey{Name: p.Service}] = true
		}
	}
	for _, n := range m.Natives {
		set[ServiceKey{Name: n}] = true
	}
	return slices.SortedFunc(maps.Keys(set), compareKeys)
}
