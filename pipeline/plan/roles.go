package plan

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// Role is one kind of node the bridge serves: the nodes announcing
// NodeCluster, as Envoys or as proxyless gRPC clients (user agent gRPC).
// What a role is served follows from the world and the group rule alone,
// so a plan computes every role the same way whatever it prints.
type Role struct {
	NodeCluster string `json:"node_cluster"`
	Proxyless   bool   `json:"proxyless,omitempty"`
}

func (r Role) String() string {
	switch {
	case r.Proxyless && r.NodeCluster == "":
		return "proxyless gRPC clients in no proxyless group"
	case r.Proxyless:
		return fmt.Sprintf("proxyless gRPC clients with node.cluster %q", r.NodeCluster)
	case strings.HasPrefix(r.NodeCluster, ir.SidecarGroupPrefix):
		return fmt.Sprintf("Connect sidecar %s", strings.TrimPrefix(r.NodeCluster, ir.SidecarGroupPrefix))
	case r.NodeCluster == "":
		return "nodes in no group"
	}
	return fmt.Sprintf("proxies with node.cluster %q", r.NodeCluster)
}

// Roles lists, sorted, the roles a plan covers: every group of the
// planned world (policy groups, Connect sidecars, proxyless groups),
// proxyless clients of no group, nodes in no group, and the role of
// every connected proxy (a group the plan drops is still planned for
// the proxies that have it).
func Roles(out *xds.Output, connected []Role) []Role {
	set := map[Role]bool{{}: true, {Proxyless: true}: true}
	for _, g := range slices.Concat(slices.Collect(maps.Keys(out.Groups)), slices.Collect(maps.Keys(out.Failed))) {
		set[Role{NodeCluster: g, Proxyless: out.ProxylessGroups[g]}] = true
	}
	for _, r := range connected {
		set[r] = true
	}
	roles := slices.Collect(maps.Keys(set))
	slices.SortFunc(roles, func(a, b Role) int {
		if c := cmp.Compare(a.NodeCluster, b.NodeCluster); c != 0 {
			return c
		}
		return cmp.Compare(fmt.Sprint(a.Proxyless), fmt.Sprint(b.Proxyless))
	})
	return roles
}

// DumpRole is the config dump a role would get from out, with the serving
// rule groupOf (pipeline.GroupOf): its group's listeners, routes and
// reach; a proxyless client outside a proxyless group the API listeners
// and their reach; a node in no group what unmatched nodes get. It
// renders as the admin API's /v1/config_dump does (keys redacted), so the
// two compare byte for byte when nothing changed.
func DumpRole(out *xds.Output, groupOf func(string) string, r Role) (*xds.ConfigDump, error) {
	g := groupOf(r.NodeCluster)
	inGroup := out.Groups[g] != nil || out.Failed[g] != nil
	var group, reach *xds.Resources
	switch {
	case inGroup && (!r.Proxyless || out.ProxylessGroups[g]):
		group, reach = out.Groups[g], out.Reach[g]
	case r.Proxyless:
		g, group, reach = "", out.Proxyless, out.ProxylessReach
	default:
		g, reach = "", out.Unmatched
	}
	d, err := dumpOf(group, reach)
	d.NodeCluster, d.Group = r.NodeCluster, g
	if r.Proxyless && g == "" {
		d.Group = "proxyless"
	}
	return d, err
}

// ConnectedRole is the role a connected proxy is served as, from what
// the admin API reports of it (/v1/proxies): a Connect sidecar by its
// group, a client whose user agent is gRPC's as proxyless, as serving
// keys them.
func ConnectedRole(nodeCluster, group, userAgent string) Role {
	if strings.HasPrefix(group, ir.SidecarGroupPrefix) {
		return Role{NodeCluster: group}
	}
	return Role{NodeCluster: nodeCluster, Proxyless: len(userAgent) >= 4 && strings.EqualFold(userAgent[:4], "grpc")}
}
