package consul

import (
	"maps"
	"slices"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Mesh is one consistent view of Consul Connect as the bridge serves it:
// the registered connect-proxy sidecars with their own health, the CA's
// trust domain and roots, and (central mode) each sidecar service's leaf.
// Intentions and protocols come from config entries, which the daemon's
// config-entry watcher follows and sets here (Intentions, Protocols).
// Never mutated once published.
type Mesh struct {
	// Proxies sorted by (Node, ID): sidecars, and gateways (Kind set).
	Proxies []Proxy `json:"proxies"`
	// TerminatingGateways are, by gateway service name, the services its
	// terminating-gateway config entry links (gateways.go).
	TerminatingGateways map[string][]LinkedService `json:"terminating_gateways,omitempty"`
	// TrustDomain is the Connect CA's ("<cluster id>.consul").
	TrustDomain string `json:"trust_domain"`
	// RootsPEM holds every root the CA lists (sorted by id), so a peer
	// whose leaf is signed by a root being rotated out still verifies.
	RootsPEM string `json:"-"`
	// Endpoints are, by upstream (ServiceKey.String(): "api", or
	// "api@dc2" for an upstream in another datacenter), the instances
	// that accept its mesh traffic (/v1/health/connect/SERVICE: its
	// sidecars and its Connect-native instances), sorted by (Node, ID).
	// A service no sidecar dials is not read; a remote one whose
	// datacenter never answered is absent.
	Endpoints map[string][]Proxy `json:"endpoints,omitempty"`
	// Leaves are the services' leaf certificates by service, in central
	// mode only.
	Leaves map[string]Leaf `json:"-"`
	// DefaultIntention is Consul's default for callers no intention
	// matches, as the agent says: allow with ACLs off or their
	// default_policy allow, deny otherwise.
	DefaultIntention ir.IntentionAction `json:"default_intention"`
	// Intentions are the service-intentions config entries, sorted by
	// name; Protocols the service-defaults protocol of each service.
	Intentions []*api.ServiceIntentionsConfigEntry `json:"-"`
	Protocols  map[string]string                   `json:"protocols,omitempty"`
	// UpstreamOverrides are, by downstream service (the service-defaults
	// entry's name), its upstream_config overrides: how that service's
	// sidecars reach each upstream, which Consul applies to no other
	// caller.
	UpstreamOverrides map[string][]*api.UpstreamConfig `json:"-"`
	// Natives are the Connect-native services (connect { native = true }:
	// proxyless gRPC servers in the mesh), sorted.
	Natives []string `json:"natives,omitempty"`
	// MeshDestinationsOnly is the mesh config entry's
	// transparent_proxy.mesh_destinations_only: transparent proxies
	// refuse destinations outside the mesh instead of passing them
	// through. The config-entry watcher sets it, as Intentions.
	MeshDestinationsOnly bool `json:"mesh_destinations_only,omitempty"`
	// GatewayModes are the central mesh_gateway modes (proxy-defaults
	// and service-defaults), set by the config-entry watcher too.
	GatewayModes GatewayModes `json:"gateway_modes,omitzero"`
	// RemoteGateways are the mesh gateways of other datacenters, by
	// datacenter: of each datacenter a local sidecar's upstream or a
	// failover target is in, sorted by (Node, ID). Absent until read.
	RemoteGateways map[string][]Proxy `json:"remote_gateways,omitempty"`
}

// Proxy is one registered connect-proxy instance.
type Proxy struct {
	// ID is the proxy's service id (the Envoy's node id), Name its
	// service name.
	ID, Name string
	// Kind is "" for a connect-proxy, else the gateway's (gateways.go).
	Kind       string `json:",omitempty"`
	Node       string
	Datacenter string
	NodeMeta   map[string]string `json:",omitempty"`
	// Tags and Meta are the proxy registration's own (a sidecar_service
	// inherits its service's unless it sets its own): what a
	// service-resolver subset filter tests in Consul's mesh.
	Tags []string          `json:",omitempty"`
	Meta map[string]string `json:",omitempty"`
	// Address is the proxy's service address, or its node's;
	// ServiceAddress the service address alone ("" if unset).
	Address        string
	ServiceAddress string `json:",omitempty"`
	Port           int
	// Service and ServiceID are the destination's
	// (proxy.destination_service_name and _id).
	Service, ServiceID string
	// LocalAddress and LocalPort are the local application's.
	LocalAddress string
	LocalPort    int
	// Protocol is proxy.config.protocol, "" if unset.
	Protocol  string     `json:",omitempty"`
	Upstreams []Upstream `json:",omitempty"`
	// Status aggregates the proxy's own and its node's checks.
	Status Status
	// Native marks a Connect-native instance (no sidecar: the service
	// itself speaks mTLS); Service and ServiceID are then its own.
	Native bool `json:",omitempty"`
	// Mode is proxy.mode ("transparent", "direct" or "" for the default),
	// OutboundPort its transparent_proxy.outbound_listener_port (0: unset).
	Mode         string `json:",omitempty"`
	OutboundPort int    `json:",omitempty"`
	// VirtualIP is the virtual IP Consul assigned the destination
	// service (tagged address "consul-virtual"), "" if none.
	VirtualIP string `json:",omitempty"`
	// GatewayMode is the proxy's mesh_gateway mode (see
	// Upstream.GatewayMode).
	GatewayMode string `json:",omitempty"`
	// WANAddress and WANPort are a mesh gateway's address for other
	// datacenters (gateways.go).
	WANAddress string `json:",omitempty"`
	WANPort    int    `json:",omitempty"`
}

// Services lists, sorted, every service the mesh's sidecars front or
// dial: their destinations' health is what the watcher must read
// besides the proxies' (a mesh endpoint is healthy only when both pass).
func (m *Mesh) Services() []ServiceKey {
	if m == nil {
		return nil
	}
	set := map[ServiceKey]bool{}
	for _, n := range m.Natives {
		set[ServiceKey{Name: n}] = true // proxyless gRPC servers: their instances are the servers
	}
	for _, p := range m.Proxies {
		if p.Kind != "" {
			continue // a gateway fronts no destination of its own
		}
		set[ServiceKey{Name: p.Service}] = true
		for _, k := range p.upstreamKeys() {
			set[k] = true
		}
	}
	return slices.SortedFunc(maps.Keys(set), compareKeys)
}

// upstreamKeys are the service upstreams of p, Datacenter "" for p's own.
func (p Proxy) upstreamKeys() []ServiceKey {
	var out []ServiceKey
	for _, u := range p.Upstreams {
		if (u.Type != "" && u.Type != "service") || u.Service == "" {
			continue
		}
		k := ServiceKey{Name: u.Service}
		if u.Datacenter != p.Datacenter {
			k.Datacenter = u.Datacenter
		}
		out = append(out, k)
	}
	return out
}
