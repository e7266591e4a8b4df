package model

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/mitchellh/hashstructure"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Mesh gateway modes (Consul 1.15's discovery chain and agent/xds): a
// sidecar's upstream in another datacenter is reached
//   - "" or "none": directly, at the target datacenter's sidecars;
//   - "local": through the mesh gateways of the sidecar's datacenter (their
//     LAN address), which forward by SNI to the target datacenter's;
//   - "remote": through the target datacenter's mesh gateways (their WAN
//     address).
// The TLS stays end to end (SNI and SAN are the target's), and each
// gateway endpoint takes the health of the target's own instances: HEALTHY
// while any of them is, as Consul serves it.
//
// Which mode: the target's own (its service-defaults' mesh_gateway, else
// proxy-defaults'), unless the sidecar's registration overrides it (the
// upstream's mesh_gateway, else the proxy's: the catalog holds them with
// the agent's central defaults already merged). An override that differs
// from the target's own mode customizes the chain, and Consul then names
// the cluster HASH~NAME, HASH being the first 8 hex digits of the
// hashstructure (v1) hash of the compile request's overrides: the bridge
// names it the same, so that two sidecars reaching one target two ways get
// two clusters, and the unprefixed name always means the target's own mode.

// Mesh gateway modes, as Consul spells them.
const (
	gatewayModeNone   = "none"
	gatewayModeLocal  = "local"
	gatewayModeRemote = "remote"
)

// gatewayChoice is how an upstream's chain reaches targets in other
// datacenters: the mode, and the cluster name prefix ("" or "HASH~") an
// override gives every cluster of the chain.
type gatewayChoice struct{ mode, prefix string }

// upstreamGatewayMode is how p's upstream u reaches its targets.
func (mb *meshBuilder) upstreamGatewayMode(who string, p consul.Proxy, u consul.Upstream) gatewayChoice {
	own := mb.mesh.GatewayModes.Of(u.Service)
	override := cmp.Or(u.GatewayMode, p.GatewayMode)
	for _, m := range []string{own, override} {
		switch m {
		case "", gatewayModeNone, gatewayModeLocal, gatewayModeRemote:
		default:
			mb.b.warn("%s: upstream %q: mesh_gateway mode %q is not one of none, local, remote; served as none", who, u.Service, m)
			return gatewayChoice{mode: gatewayModeNone}
		}
	}
	if override == "" || override == own {
		return gatewayChoice{mode: own}
	}
	return gatewayChoice{mode: override, prefix: customizationPrefix(override)}
}

// customizationPrefix is Consul's chain customization hash for an
// override of the mesh gateway mode alone, with the "~" that joins it to
// the target's name (discoverychain.compile and xds.CustomizeClusterName).
func customizationPrefix(mode string) string {
	// The shape of Consul's struct: hashstructure hashes field and type
	// names, so both must be Consul's.
	type MeshGatewayConfig struct{ Mode string }
	var customization struct {
		OverrideMeshGateway    MeshGatewayConfig
		OverrideProtocol       string
		OverrideConnectTimeout time.Duration
	}
	customization.OverrideMeshGateway.Mode = mode
	v, err := hashstructure.Hash(customization, nil)
	if err != nil {
		panic(err) // a struct of strings and an integer always hashes
	}
	return fmt.Sprintf("%x", v)[0:8] + "~"
}

// sniOf is the SNI of a mesh cluster name: the name without a
// customization prefix.
func sniOf(name string) string {
	if _, after, ok := strings.Cut(name, "~"); ok && len(name)-len(after) == 9 {
		return after
	}
	return name
}

// gatewayEndpoints are the endpoints of a target in datacenter dc reached
// through mesh gateways in mode (local or remote): the gateways, each
// with the health of the target's own instances, real (HEALTHY while any
// of them is), unless the gateway itself is critical or in maintenance.
func (mb *meshBuilder) gatewayEndpoints(name, mode, dc, localDC string, real []ir.Endpoint) []ir.Endpoint {
	var gws []consul.Proxy
	gwDC := localDC
	switch mode {
	case gatewayModeLocal:
		for _, p := range mb.mesh.Proxies {
			if p.Kind == consul.KindMeshGateway && p.Datacenter == localDC {
				gws = append(gws, p)
			}
		}
	case gatewayModeRemote:
		gwDC = dc
		for _, p := range mb.mesh.RemoteGateways[dc] {
			p.Address, p.Port = p.WANAddress, p.WANPort
			gws = append(gws, p)
		}
	default:
		return real
	}
	if len(gws) == 0 {
		mb.b.warn("mesh cluster %q: mesh_gateway mode %q, but datacenter %q has no mesh gateway (yet); no endpoints", name, mode, gwDC)
		return nil
	}
	health := ir.Unhealthy
	for _, e := range real {
		if e.Health == ir.Healthy {
			health = ir.Healthy
			break
		}
	}
	var out []ir.Endpoint
	for _, p := range gws {
		ep, warn := endpoint(consul.Instance{ID: p.ID, Node: p.Node, Datacenter: p.Datacenter, Address: p.Address, Port: p.Port, NodeMeta: p.NodeMeta, Status: p.Status}, false)
		if warn != "" {
			mb.b.warn("mesh gateway %q on node %q: %s", p.ID, p.Node, warn)
			continue
		}
		if ep.Health == ir.Healthy {
			ep.Health = health
		}
		out = append(out, ep)
	}
	return out
}
