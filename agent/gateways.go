package agent

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// Gateways through the agent. A Consul gateway registered on the local
// Consul agent is keyed and relayed like a sidecar (its service id is its
// node id, as Consul keys it), so the central bridge serves it the
// gateway's listener. A terminating gateway acts for the services its
// entry links: the agent serves it their leaves, which stay on the VM,
// as it serves a sidecar its service's, and under the same rules (each
// linked service must be in connect.services, and the socket peer allowed
// for each). A mesh gateway acts for no service and gets no leaf.

// gateway is the index entry of a local gateway registration; for a
// terminating gateway its Upstreams are the linked services' names, read
// from the local agent (/v1/catalog/gateway-services, which resolves the
// entry as Consul does).
func (s *localSidecars) gateway(node, id string, svc *api.AgentService, q *api.QueryOptions) (serve.SidecarInfo, error) {
	info := serve.SidecarInfo{Node: node, Service: svc.Service, Kind: string(svc.Kind)}
	if svc.Kind != api.ServiceKindTerminatingGateway {
		return info, nil
	}
	links, _, err := s.client.Catalog().GatewayServices(svc.Service, q)
	if err != nil {
		return info, fmt.Errorf("services linked to terminating gateway %q: %w", svc.Service, err)
	}
	for _, l := range links {
		// A wildcard link is not served by the central bridge (no chain):
		// its services' keys would have no use here.
		if l != nil && l.GatewayKind == api.ServiceKindTerminatingGateway && !l.FromWildcard && l.Service.Name != "" && l.Service.Name != "*" {
			info.Upstreams = append(info.Upstreams, l.Service.Name)
		}
	}
	slices.Sort(info.Upstreams)
	info.Upstreams = slices.Compact(info.Upstreams)
	for _, u := range info.Upstreams {
		if !slices.Contains(s.a.cfg.ConnectServices, u) && !s.warned[id+"\x00"+u] {
			s.warned[id+"\x00"+u] = true
			s.a.log.Warn().Str("proxy_id", id).Str("service", u).
				Msg("a local terminating gateway links a service not in connect.services, so the agent serves it no leaf for that service; add it")
		}
	}
	return info, nil
}

// actsFor lists the services whose leaves the sidecar or gateway keyed k
// would get, before the connect.services and peer checks: a sidecar's
// service, a terminating gateway's linked services, nothing for a mesh
// gateway or an unknown key.
func (a *Agent) actsFor(k serve.RelayKey) []string {
	s := a.sidecars
	s.mu.Lock()
	defer s.mu.Unlock()
	for proxyID, infos := range s.index {
		for _, info := range infos {
			if info.Group(proxyID) != k.NodeCluster {
				continue
			}
			switch info.Kind {
			case "":
				return []string{info.Service}
			case string(api.ServiceKindTerminatingGateway):
				var out []string
				for _, u := range info.Upstreams {
					name, _, _ := strings.Cut(u, "@")
					out = append(out, name)
				}
				return out
			}
			return nil
		}
	}
	return nil
}
