package consul

import (
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
	for _, e := range entries {
		switch c := e.(type) {
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
			m.addOverrides(c)
		}
	}
	slices.SortFunc(m.Intentions, func(a, b *api.ServiceIntentionsConfigEntry) int { return strings.Compare(a.Name, b.Name) })
}
