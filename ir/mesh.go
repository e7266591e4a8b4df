package ir

// The service mesh (Consul Connect): sidecars known from Consul's own
// connect-proxy registrations, their identities (SPIFFE, issued by the
// Connect CA) and the intentions that say who may call whom.
//
// A sidecar is a proxy group of its own (Group.Sidecar set): its
// listeners (one public, one per upstream) and clusters are derived from
// the registration, so each registered proxy gets exactly what it dials.

// Mesh-wide constants of the names the bridge shares with Consul's own
// xDS server, so the same Envoys can be pointed at either.
const (
	// LeafSecretPrefix + SERVICE is the SDS secret holding SERVICE's
	// Connect leaf certificate and key. The per-VM agent serves it from
	// its local Consul agent (keys stay on the VM); in central mode the
	// bridge serves it to the sidecars of SERVICE only.
	LeafSecretPrefix = "consul-connect/leaf/"
	// RootsSecretName is the SDS secret holding the Connect CA roots
	// (the trust bundle every mesh peer's certificate chains to).
	RootsSecretName = "consul-connect/roots"
)

// Sidecar is one registered connect-proxy: the proxy in front of one
// instance of Service on one Consul node.
type Sidecar struct {
	// ProxyID is the connect-proxy's Consul service id, which a sidecar
	// Envoy announces as its node id (as with Consul's own xDS server).
	ProxyID string
	// Node is the Consul node the proxy is registered on; with ProxyID it
	// identifies the proxy across the catalog.
	Node string
	// Service is the destination service (proxy.destination_service_name).
	Service string
	// Datacenter is the local datacenter, for SPIFFE ids and SNI names.
	Datacenter string
	// Address and Port are the public listener's (the proxy
	// registration's own address and port); Address "" binds 0.0.0.0.
	Address string
	Port    uint32
	// LocalAddress and LocalPort are the local application's
	// (local_service_address, default 127.0.0.1; local_service_port).
	LocalAddress string
	LocalPort    uint32
	// LocalCluster names the cluster (in Model.Clusters and the group's
	// Clusters) whose one endpoint is the local application; the public
	// listener forwards to it.
	LocalCluster string
	// Protocol is the destination's protocol: "tcp", "http", "http2" or
	// "grpc" (Consul's service-defaults, or the bridge's service block).
	Protocol  string
	Upstreams []MeshUpstream
	// Intentions decide who may call Service, in evaluation order.
	Intentions Intentions
	// Transparent, for a proxy registered in transparent mode, is its
	// outbound listener (tproxy.go); its implicit upstreams are the
	// Upstreams without a BindPort.
	Transparent *TransparentOutbound `json:",omitempty"`
}

// MeshUpstream is one upstream of a sidecar: a local listener that
// originates mutual TLS to the destination's sidecars.
type MeshUpstream struct {
	// Service is the destination service; Datacenter "" is the local one.
	Service    string
	Datacenter string
	// BindAddress (default 127.0.0.1) and BindPort are the local listener's;
	// BindPort 0 marks an implicit upstream of a transparent proxy,
	// matched by VirtualIPs on its outbound listener instead (tproxy.go).
	BindAddress string
	BindPort    uint32
	VirtualIPs  []string `json:",omitempty"`
	// Protocol is the upstream service's protocol ("tcp", "http", "http2",
	// "grpc"); HTTP upstreams take the policy's routes for that service.
	Protocol string
	// Cluster is the mesh cluster of the upstream's sidecars, named as
	// Consul names it and as the SNI the client sends:
	// SERVICE.default.DC.internal.TRUST-DOMAIN. It is an ordinary
	// cluster of Model.Clusters (endpoints: the upstream's sidecars, TLS
	// with the local leaf, the roots and the upstream's SPIFFE id as
	// MatchURISANs) and in the group's Clusters.
	Cluster string
	// Routes, for an HTTP upstream, are the policy's routes for the
	// service (its mesh_routes block: splits, retries, timeouts) with
	// mesh clusters as targets, each in the group's Clusters; nil means
	// one route sending everything to Cluster.
	Routes []Route `json:",omitempty"`
}

// IntentionAction is what an intention does with a matching caller.
type IntentionAction string

// Intention actions.
const (
	IntentionAllow IntentionAction = "allow"
	IntentionDeny  IntentionAction = "deny"
)

// Intentions are the intentions that apply to one destination, resolved
// with Consul's precedence: Rules are in evaluation order (highest
// precedence first; the first rule whose source matches decides), and
// Default applies to callers no rule matches.
type Intentions struct {
	Default IntentionAction
	Rules   []IntentionRule
}

// IntentionRule is one source of a service-intentions entry.
type IntentionRule struct {
	// Source is a service name or "*" (any service in the mesh).
	Source string
	// Action is set for an L4 intention; empty when Permissions are.
	Action IntentionAction
	// Permissions are L7 rules, evaluated in order: the first whose
	// request match applies decides; a request none matches gets
	// Intentions.Default (as in Consul: the source's rule still decides
	// that no lower-precedence rule applies to it).
	Permissions []IntentionPermission
	// Precedence is Consul's precedence of the rule (higher wins), kept
	// for operators and tests.
	Precedence int
}

// IntentionPermission is one L7 permission of an intention.
type IntentionPermission struct {
	Action IntentionAction
	// At most one of the path matches is set.
	PathExact, PathPrefix, PathRegex string
	// Methods are HTTP methods (upper case); empty matches every method.
	Methods []string
	Headers []IntentionHeader
}

// IntentionHeader matches one request header, as Consul's
// IntentionHTTPHeaderPermission: Present, or one of the value matches,
// optionally inverted.
type IntentionHeader struct {
	Name                         string
	Present                      bool
	Exact, Prefix, Suffix, Regex string
	// Contains matches a value holding the text anywhere; IgnoreCase
	// makes Exact, Prefix, Suffix and Contains case-insensitive (as
	// Consul's header permissions have them).
	Contains   string `json:",omitempty"`
	IgnoreCase bool   `json:",omitempty"`
	Invert     bool
}

// SPIFFEID is the identity Consul's Connect CA puts in a service's leaf
// certificate (its URI SAN).
func SPIFFEID(trustDomain, datacenter, service string) string {
	return "spiffe://" + trustDomain + "/ns/default/dc/" + datacenter + "/svc/" + service
}

// MeshClusterName is the name (and SNI) of the mesh cluster of a
// service's sidecars, as Consul names it.
func MeshClusterName(service, datacenter, trustDomain string) string {
	return service + ".default." + datacenter + ".internal." + trustDomain
}

// FailoverTargetPrefix starts the name of a mesh failover target's
// cluster under the aggregate cluster that fails over to it, as Consul
// names them: failover-target~SNI.
const FailoverTargetPrefix = "failover-target~"

// MeshSubsetClusterName is the name (and SNI) of the mesh cluster of a
// service-resolver subset of a service's sidecars, as Consul names it:
// SUBSET.SERVICE.default.DC.internal.TRUST-DOMAIN.
func MeshSubsetClusterName(subset, service, datacenter, trustDomain string) string {
	if subset == "" {
		return MeshClusterName(service, datacenter, trustDomain)
	}
	return subset + "." + MeshClusterName(service, datacenter, trustDomain)
}

// Mesh is the mesh-wide part of the model; nil when no sidecar is
// registered and the policy declares no mesh.
type Mesh struct {
	// TrustDomain is the Connect CA's (from its roots).
	TrustDomain string
	// Central makes the bridge serve each sidecar group its service's
	// leaf and the roots as group secrets (fetched from Consul with a
	// token allowed to sign for those services). Otherwise the per-VM
	// agent serves LeafSecretPrefix+SERVICE and RootsSecretName from its
	// local Consul agent and the bridge serves no mesh secret.
	Central bool
}

// SidecarGroupName is the group name of a registered sidecar: its Consul
// node and proxy id, which no node.cluster-named group can take (the
// model rejects policy groups with this prefix).
func SidecarGroupName(node, proxyID string) string {
	return SidecarGroupPrefix + node + "/" + proxyID
}

// SidecarGroupPrefix starts every sidecar group's name.
const SidecarGroupPrefix = "sidecar:"
