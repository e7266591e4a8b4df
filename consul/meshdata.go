package consul

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Normalising what Consul says of the mesh: sorted, copied, compared by
// content, as for the catalog (catalog.go).

// Upstream is one upstream of a proxy registration.
type Upstream struct {
	// Type is "service" ("" in Consul's API) or "prepared_query".
	Type        string `json:",omitempty"`
	Service     string
	Datacenter  string `json:",omitempty"`
	BindAddress string `json:",omitempty"`
	BindPort    int
	Protocol    string `json:",omitempty"`
	// GatewayMode is the upstream's mesh_gateway mode as the catalog
	// holds it ("local", "remote", "none" or "" for unset; the agent
	// has already merged the proxy's and the central defaults into it).
	GatewayMode string `json:",omitempty"`
}

// Leaf is a service's Connect leaf certificate.
type Leaf struct {
	CertPEM string
	KeyPEM  ir.Redacted
	// ServiceURI is its SPIFFE id; ValidBefore when it expires.
	ServiceURI  string
	ValidBefore time.Time
}

// aclDefault reads /v1/agent/self's DebugConfig: Consul's default
// intention is allow with ACLs disabled, else the ACL default_policy.
func aclDefault(self map[string]map[string]any) ir.IntentionAction {
	dc := self["DebugConfig"]
	enabled, _ := dc["ACLsEnabled"].(bool)
	policy := "deny"
	if rs, ok := dc["ACLResolverSettings"].(map[string]any); ok {
		if e, ok := rs["ACLsEnabled"].(bool); ok {
			enabled = enabled || e
		}
		if p, ok := rs["ACLDefaultPolicy"].(string); ok {
			policy = p
		}
	}
	if !enabled || policy == "allow" {
		return ir.IntentionAllow
	}
	return ir.IntentionDeny
}

// NewProxies normalises a proxy service's /v1/health/service response:
// connect-proxy instances only, node address as fallback, status
// aggregated as for any instance, sorted.
func NewProxies(entries []*api.ServiceEntry) []Proxy {
	var out []Proxy
	for _, e := range entries {
		if e == nil || e.Node == nil || e.Service == nil {
			continue
		}
		if g, ok := newGateway(e); ok {
			out = append(out, g)
			continue
		}
		if e.Service.Kind != api.ServiceKindConnectProxy || e.Service.Proxy == nil {
			continue
		}
		s, px := e.Service, e.Service.Proxy
		p := Proxy{
			ID: s.ID, Name: s.Service, Node: e.Node.Node, Datacenter: e.Node.Datacenter, NodeMeta: mapCopy(e.Node.Meta),
			Tags: sortedTags(s.Tags), Meta: mapCopy(s.Meta),
			Address: cmp.Or(s.Address, e.Node.Address), ServiceAddress: s.Address, Port: s.Port,
			Service: px.DestinationServiceName, ServiceID: cmp.Or(px.DestinationServiceID, px.DestinationServiceName),
			LocalAddress: px.LocalServiceAddress, LocalPort: px.LocalServicePort,
			Protocol: configString(px.Config, "protocol"),
			Status:   aggregate(e.Checks),
			Mode:     string(px.Mode), VirtualIP: s.TaggedAddresses[VirtualIPTag].Address,
			GatewayMode: string(px.MeshGateway.Mode),
		}
		if px.TransparentProxy != nil {
			p.OutboundPort = px.TransparentProxy.OutboundListenerPort
		}
		for _, u := range px.Upstreams {
			p.Upstreams = append(p.Upstreams, Upstream{
				Type: string(u.DestinationType), Service: u.DestinationName, Datacenter: u.Datacenter,
				BindAddress: u.LocalBindAddress, BindPort: u.LocalBindPort, Protocol: configString(u.Config, "protocol"),
				GatewayMode: string(u.MeshGateway.Mode),
			})
		}
		slices.SortFunc(p.Upstreams, func(a, b Upstream) int {
			return cmp.Or(cmp.Compare(a.BindPort, b.BindPort), cmp.Compare(a.BindAddress, b.BindAddress))
		})
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Proxy) int { return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID)) })
	return out
}

// newConnectEndpoints normalises a /v1/health/connect response: the
// service's sidecars (as NewProxies) and its Connect-native instances.
func newConnectEndpoints(entries []*api.ServiceEntry) []Proxy {
	out := NewProxies(entries)
	for _, e := range entries {
		if e == nil || e.Node == nil || e.Service == nil || e.Service.Kind != api.ServiceKindTypical || e.Service.Connect == nil || !e.Service.Connect.Native {
			continue
		}
		s := e.Service
		out = append(out, Proxy{
			ID: s.ID, Name: s.Service, Node: e.Node.Node, Datacenter: e.Node.Datacenter, NodeMeta: mapCopy(e.Node.Meta),
			Tags: sortedTags(s.Tags), Meta: mapCopy(s.Meta),
			Address: cmp.Or(s.Address, e.Node.Address), ServiceAddress: s.Address, Port: s.Port,
			Service: s.Service, ServiceID: s.ID, Status: aggregate(e.Checks), Native: true,
			VirtualIP: s.TaggedAddresses[VirtualIPTag].Address,
		})
	}
	slices.SortFunc(out, func(a, b Proxy) int { return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID)) })
	return out
}

func configString(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func equalProxies(a, b []Proxy) bool {
	return slices.EqualFunc(a, b, func(x, y Proxy) bool {
		return x.ID == y.ID && x.Name == y.Name && x.Kind == y.Kind && x.Node == y.Node && x.Datacenter == y.Datacenter &&
			maps.Equal(x.NodeMeta, y.NodeMeta) && slices.Equal(x.Tags, y.Tags) && maps.Equal(x.Meta, y.Meta) && x.Address == y.Address && x.ServiceAddress == y.ServiceAddress && x.Port == y.Port &&
			x.Service == y.Service && x.ServiceID == y.ServiceID && x.LocalAddress == y.LocalAddress &&
			x.LocalPort == y.LocalPort && x.Protocol == y.Protocol && x.Status == y.Status && x.Native == y.Native &&
			x.Mode == y.Mode && x.OutboundPort == y.OutboundPort && x.VirtualIP == y.VirtualIP &&
			slices.Equal(x.Upstreams, y.Upstreams)
	})
}

func equalRoots(a, b *api.CARootList) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.TrustDomain == b.TrustDomain && a.ActiveRootID == b.ActiveRootID &&
		slices.EqualFunc(a.Roots, b.Roots, func(x, y *api.CARoot) bool { return x.ID == y.ID && x.RootCertPEM == y.RootCertPEM })
}

// sortedTags is a sorted copy of tags (nil for none), as instances keep
// theirs for subset matching.
func sortedTags(tags []string) []string {
	if len(tags) == 0 {
		return nil
	}
	out := slices.Clone(tags)
	slices.Sort(out)
	return out
}

// upstreams are the service upstreams of every proxy and the extra
// targets, sorted. A transparent proxy may dial every service of the
// mesh (its implicit upstreams), so with one registered every sidecar's
// destination is followed too (TransparentTargets).
func (m *Mesh) upstreams(extra ...ServiceKey) []ServiceKey {
	set := map[ServiceKey]bool{}
	for _, k := range extra {
		set[k] = true
	}
	for _, p := range m.Proxies {
		for _, k := range p.upstreamKeys() {
			set[k] = true
		}
	}
	for _, k := range m.TransparentTargets() {
		set[k] = true
	}
	return slices.SortedFunc(maps.Keys(set), compareKeys)
}
