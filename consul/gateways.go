package consul

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
)

// Gateways: Consul's terminating and mesh gateways are registrations of
// their own kind, listed with the connect-proxy sidecars (proxyFilter) and
// read the same way (health of the gateway service), so they share the
// mesh watcher's queries, its first-sync rule and its keying by service id.
// A terminating gateway's linked services come from its
// terminating-gateway config entry, which the config-entry watcher follows
// with the other mesh kinds (SetEntries).

// Gateway kinds, as Consul spells them in a registration's Kind.
const (
	KindTerminatingGateway = string(api.ServiceKindTerminatingGateway)
	KindMeshGateway        = string(api.ServiceKindMeshGateway)
)

// LinkedService is one service a terminating gateway's config entry
// links: the gateway forwards that service's mesh traffic to its
// (external) instances, originating TLS with the entry's files, which are
// paths on the gateway's host (no key travels).
type LinkedService struct {
	Name                      string
	CAFile, CertFile, KeyFile string `json:",omitempty"`
	SNI                       string `json:",omitempty"`
}

// IsGateway reports whether p is a gateway registration, not a sidecar.
func (p Proxy) IsGateway() bool { return p.Kind != "" }

// newGateway normalises a gateway instance of /v1/health/service: the
// fields a gateway listener needs (address, port, health), no proxy
// destination of its own.
func newGateway(e *api.ServiceEntry) (Proxy, bool) {
	s := e.Service
	if s.Kind != api.ServiceKindTerminatingGateway && s.Kind != api.ServiceKindMeshGateway {
		return Proxy{}, false
	}
	p := Proxy{
		Kind: string(s.Kind), ID: s.ID, Name: s.Service, Node: e.Node.Node, Datacenter: e.Node.Datacenter,
		NodeMeta: mapCopy(e.Node.Meta), Tags: sortedTags(s.Tags), Meta: mapCopy(s.Meta),
		Address: cmp.Or(s.Address, e.Node.Address), ServiceAddress: s.Address, Port: s.Port,
		Status: aggregate(e.Checks),
	}
	p.WANAddress, p.WANPort = wanAddress(e)
	return p, true
}

// wanAddress is where other datacenters reach a gateway, in Consul's
// order (structs.CheckServiceNode.BestAddress(wan)): the service's "wan"
// tagged address (its port, if it has one), else the service address,
// else the node's "wan" tagged address, else the node address.
func wanAddress(e *api.ServiceEntry) (string, int) {
	s := e.Service
	addr, port := s.Address, s.Port
	if wan, ok := s.TaggedAddresses["wan"]; ok {
		addr = wan.Address
		if wan.Port != 0 {
			port = wan.Port
		}
	}
	if addr == "" {
		addr = cmp.Or(e.Node.TaggedAddresses["wan"], e.Node.Address)
	}
	return addr, port
}

// setTerminatingGateway files a terminating-gateway entry's linked
// services under the gateway's name, sorted by service name.
func (m *Mesh) setTerminatingGateway(e *api.TerminatingGatewayConfigEntry) {
	if m.TerminatingGateways == nil {
		m.TerminatingGateways = map[string][]LinkedService{}
	}
	var out []LinkedService
	for _, s := range e.Services {
		out = append(out, LinkedService{Name: s.Name, CAFile: s.CAFile, CertFile: s.CertFile, KeyFile: s.KeyFile, SNI: s.SNI})
	}
	slices.SortFunc(out, func(a, b LinkedService) int { return strings.Compare(a.Name, b.Name) })
	m.TerminatingGateways[e.Name] = out
}

// LinkedServices lists, sorted, the services linked to a registered
// terminating gateway: their instances are the gateway's endpoints (the
// catalog watcher follows them) and, in central mode, their leaves are
// the gateway's certificates. The wildcard "*" is not a service.
func (m *Mesh) LinkedServices() []string {
	if m == nil {
		return nil
	}
	set := map[string]bool{}
	for _, p := range m.Proxies {
		if p.Kind != KindTerminatingGateway {
			continue
		}
		for _, s := range m.TerminatingGateways[p.Name] {
			if s.Name != "*" {
				set[s.Name] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// CatalogTargets are the services whose catalog health the mesh needs
// besides the policy's: what Services lists, and the services linked to
// terminating gateways (their instances are the gateways' endpoints). The
// daemon and one-shot commands (plan) both follow exactly these.
func (m *Mesh) CatalogTargets() []ServiceKey {
	out := m.Services()
	for _, n := range m.LinkedServices() {
		out = append(out, ServiceKey{Name: n})
	}
	return out
}

// MeshGatewayTargets are, with a mesh gateway registered, the services
// linked to terminating gateways: a mesh gateway routes to them too (their
// Connect endpoints are those gateways, as Consul answers), so their
// Connect health is followed like a sidecar upstream's. Nil otherwise.
func (m *Mesh) MeshGatewayTargets() []ServiceKey {
	if m == nil || !slices.ContainsFunc(m.Proxies, func(p Proxy) bool { return p.Kind == KindMeshGateway }) {
		return nil
	}
	var out []ServiceKey
	for _, n := range m.LinkedServices() {
		out = append(out, ServiceKey{Name: n})
	}
	return out
}

// SetLeafServices sets the services whose leaves the watcher follows in
// central mode besides its sidecars' (the services linked to terminating
// gateways, which only the config entries name). Safe from any
// goroutine; never blocks.
func (w *MeshWatcher) SetLeafServices(names []string) {
	w.mu.Lock()
	same := slices.Equal(w.leaves, names)
	w.leaves = slices.Clone(names)
	w.mu.Unlock()
	if same {
		return
	}
	signal(w.retarget)
}

func (w *MeshWatcher) leafServices() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.leaves)
}
