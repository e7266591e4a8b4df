package consul

import (
	"cmp"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
)

// The mesh's part of the config entries: intentions, protocols and
// upstream overrides from service-defaults.

// addOverrides files d's upstream_config overrides under d's name.
func (m *Mesh) addOverrides(d *api.ServiceConfigEntry) {
	if d.UpstreamConfig == nil || len(d.UpstreamConfig.Overrides) == 0 {
		return
	}
	if m.UpstreamOverrides == nil {
		m.UpstreamOverrides = map[string][]*api.UpstreamConfig{}
	}
	m.UpstreamOverrides[d.Name] = d.UpstreamConfig.Overrides
}

// SetEntries sets the mesh's part of the config entries: the intentions
// (sorted by name), each service-defaults protocol and upstream overrides.
func (m *Mesh) SetEntries(entries []api.ConfigEntry) {
	m.Intentions, m.Protocols, m.UpstreamOverrides, m.MeshDestinationsOnly, m.TerminatingGateways = nil, nil, nil, false, nil
	m.GatewayModes = GatewayModes{}
	for _, e := range entries {
		switch c := e.(type) {
		case *api.ProxyConfigEntry:
			if c.Name == api.ProxyConfigGlobal {
				m.GatewayModes.Default = string(c.MeshGateway.Mode)
			}
		case *api.TerminatingGatewayConfigEntry:
			m.setTerminatingGateway(c)
		case *api.MeshConfigEntry:
			m.MeshDestinationsOnly = c.TransparentProxy.MeshDestinationsOnly
		case *api.ServiceIntentionsConfigEntry:
			m.Intentions = append(m.Intentions, c)
		case *api.ServiceConfigEntry:
			if c.Protocol != "" {
				if m.Protocols == nil {
					m.Protocols = map[string]string{}
				}
				m.Protocols[c.Name] = c.Protocol
			}
			if c.MeshGateway.Mode != "" {
				if m.GatewayModes.Services == nil {
					m.GatewayModes.Services = map[string]string{}
				}
				m.GatewayModes.Services[c.Name] = string(c.MeshGateway.Mode)
			}
			m.addOverrides(c)
		}
	}
	slices.SortFunc(m.Intentions, func(a, b *api.ServiceIntentionsConfigEntry) int { return strings.Compare(a.Name, b.Name) })
}

// GatewayModes are the mesh_gateway modes of the config entries: Default
// is proxy-defaults', Services each service-defaults' (by service). In
// Consul's discovery chain they are a target's own mode; a sidecar's or
// upstream's registration may override it (Upstream.GatewayMode).
type GatewayModes struct {
	Default  string            `json:"default,omitempty"`
	Services map[string]string `json:"services,omitempty"`
}

// Of is the mode of a target of service: its service-defaults', else
// proxy-defaults' ("" when neither sets one).
func (g GatewayModes) Of(service string) string {
	return cmp.Or(g.Services[service], g.Default)
}
