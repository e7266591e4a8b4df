package bridge

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/configentry"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// The service mesh in the daemon: a consul.MeshWatcher follows the
// sidecar registrations, CA roots and (central mode) leaves; the
// config-entry watcher, shared with consul.config_entries, also follows
// service-intentions and service-defaults for the mesh. Both join the
// catalog as Catalog.Mesh for model.Build, and the destinations of the
// sidecars join the catalog watcher's targets (a mesh endpoint is healthy
// only when its destination instance passes too).

// meshKinds are the config entry kinds the mesh reads (the mesh entry
// for transparent proxies' mesh_destinations_only).
var meshKinds = []string{api.ServiceDefaults, api.ServiceIntentions, api.MeshConfig, api.TerminatingGateway, api.ProxyDefaults}

// meshWanted reports whether a policy uses the mesh, which the daemon
// decides at start (the watchers run for its life).
func meshWanted(p *policy.Policy) bool { return p.UsesMesh() }

// configKinds are the kinds the config-entry watcher follows.
func configKinds(policyEntries, mesh bool) []string {
	var kinds []string
	if policyEntries {
		kinds = append(kinds, configentry.Kinds...)
	}
	if mesh {
		for _, k := range meshKinds {
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	return kinds
}

// meshState is the loop's view of the mesh.
type meshState struct {
	needed bool
	// central is the mode the watchers started in.
	central bool
	mesh    *consul.Mesh // nil until the first read
	// entries are the mesh's config entries; nil until the first read.
	intentions []*api.ServiceIntentionsConfigEntry
	protocols  map[string]string
	overrides  map[string][]*api.UpstreamConfig
	// destinationsOnly is the mesh entry's mesh_destinations_only.
	destinationsOnly bool
	// terminating are the terminating-gateway entries' links by gateway.
	terminating map[string][]consul.LinkedService
	// gatewayModes are proxy-defaults' and service-defaults' mesh_gateway.
	gatewayModes consul.GatewayModes
	entriesSet   bool
}

func (s *meshState) waiting() bool { return s.needed && (s.mesh == nil || !s.entriesSet) }

// setEntries takes the mesh's part of a config-entry update, reporting
// whether it changed.
func (s *meshState) setEntries(entries []api.ConfigEntry) bool {
	var m consul.Mesh
	m.SetEntries(entries)
	changed := !s.entriesSet || !maps.Equal(m.Protocols, s.protocols) || !sameJSON(m.Intentions, s.intentions) ||
		!sameJSON(m.UpstreamOverrides, s.overrides) || m.MeshDestinationsOnly != s.destinationsOnly || !sameJSON(m.TerminatingGateways, s.terminating) ||
		!sameJSON(m.GatewayModes, s.gatewayModes)
	s.intentions, s.protocols, s.overrides, s.destinationsOnly, s.entriesSet = m.Intentions, m.Protocols, m.UpstreamOverrides, m.MeshDestinationsOnly, true
	s.terminating, s.gatewayModes = m.TerminatingGateways, m.GatewayModes
	return changed
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// policyEntries drops the mesh-only kinds from a config-entry update, for
// the policy made from entries.
func policyEntries(u consul.ConfigEntriesUpdate) consul.ConfigEntriesUpdate {
	out := consul.ConfigEntriesUpdate{ChangedAt: u.ChangedAt}
	for _, e := range u.Entries {
		if slices.Contains(configentry.Kinds, e.GetKind()) {
			out.Entries = append(out.Entries, e)
		}
	}
	return out
}

// withMesh is cat with the mesh joined, for Build; cat itself is shared
// and never changed.
func (s *meshState) withMesh(cat *consul.Catalog) *consul.Catalog {
	if !s.needed || s.mesh == nil || cat == nil {
		return cat
	}
	m := *s.mesh
	m.Intentions, m.Protocols, m.UpstreamOverrides, m.MeshDestinationsOnly = s.intentions, s.protocols, s.overrides, s.destinationsOnly
	m.TerminatingGateways, m.GatewayModes = s.terminating, s.gatewayModes
	c := *cat
	c.Mesh = &m
	return &c
}

// watchTargets is the policy's targets plus the mesh's destinations.
func (s *meshState) watchTargets(p *policy.Policy) consul.Targets {
	t := model.WatchTargets(p)
	if s.mesh != nil {
		// With the entries the loop holds: a terminating gateway's linked
		// services are its endpoints (gateways.go).
		m := *s.mesh
		m.TerminatingGateways = s.terminating
		t.Services = append(t.Services, m.CatalogTargets()...)
	}
	return t
}

// pendingTargets are the policy's mesh_routes targets whose connect
// health the mesh watcher has not read yet (a reload just added them):
// the build waits for them as for pending catalog services, so a new
// split target is not served without endpoints in the meantime.
func (s *meshState) pendingTargets(p *policy.Policy) []string {
	if !s.needed || s.mesh == nil || s.mesh.Endpoints == nil {
		return nil
	}
	var out []string
	for _, k := range model.MeshWatchTargets(p) {
		// Another datacenter (a failover tier) may never answer; as for
		// remote upstreams, it never holds a build back.
		if k.Datacenter != "" {
			continue
		}
		if _, ok := s.mesh.Endpoints[k.String()]; !ok {
			out = append(out, k.String())
		}
	}
	return out
}

// sidecarIndex lists the registered sidecars of a model by proxy id, for
// serve's keying and /v1/proxies.
func sidecarIndex(m *ir.Model) map[string][]serve.SidecarInfo {
	idx := map[string][]serve.SidecarInfo{}
	gatewayIndex(m, idx) // gateways.go
	for _, g := range m.Groups {
		sc := g.Sidecar
		if sc == nil || g.Name != ir.SidecarGroupName(sc.Node, sc.ProxyID) {
			continue // a policy group declared sidecar_for
		}
		info := serve.SidecarInfo{Node: sc.Node, Service: sc.Service}
		for _, u := range sc.Upstreams {
			if u.Implicit() {
				info.Upstreams = append(info.Upstreams, fmt.Sprintf("%s@%s (transparent)", u.Service, strings.Join(u.VirtualIPs, ",")))
				continue
			}
			info.Upstreams = append(info.Upstreams, fmt.Sprintf("%s@%s:%d", u.Service, u.BindAddress, u.BindPort))
		}
		idx[sc.ProxyID] = append(idx[sc.ProxyID], info)
	}
	return idx
}

func centralMesh(p *policy.Policy) bool { return p.CentralMesh() }

// restartNeeded says why a policy's mesh settings cannot apply until a
// restart ("" if they can): the watchers are started with the daemon.
func (s *meshState) restartNeeded(p *policy.Policy) string {
	switch {
	case meshWanted(p) != s.needed:
		return "the policy adds or removes the mesh block (or sidecar_for); restart to start or stop following Consul Connect"
	case s.needed && centralMesh(p) != s.central:
		return "the mesh mode changed; restart to apply it (leaves are fetched only in central mode)"
	}
	return ""
}
