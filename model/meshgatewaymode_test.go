package model

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// TestCustomizationPrefixIsConsuls: the prefixes Consul 1.15.4's own xDS
// server gave the clusters of upstreams whose registration overrides the
// mesh gateway mode (read from its output in a two-datacenter run:
// bridge.TestMeshGatewayModesMatchConsulXDS compares them live).
func TestCustomizationPrefixIsConsuls(t *testing.T) {
	for mode, want := range map[string]string{"local": "c225dc1c~", "remote": "dd412229~"} {
		if got := customizationPrefix(mode); got != want {
			t.Errorf("mode %s: prefix %q, Consul's %q", mode, got, want)
		}
	}
	for name, want := range map[string]string{
		"c225dc1c~api.default.dc2.internal.td":        "api.default.dc2.internal.td",
		"api.default.dc2.internal.td":                 "api.default.dc2.internal.td",
		"failover-target~api.default.dc2.internal.td": "failover-target~api.default.dc2.internal.td",
	} {
		if got := sniOf(name); got != want {
			t.Errorf("sniOf(%q) = %q, want %q", name, got, want)
		}
	}
}

// crossDCCatalog is meshCatalog with web's sidecar dialing api in dc2
// (upstream mode upMode, proxy-defaults mode defMode), api's dc2 sidecar
// (status remote), a mesh gateway in dc1 (LAN 10.0.0.4:8443) and two in
// dc2 (WAN 203.0.113.4:443 passing, 203.0.113.5:443 critical).
func crossDCCatalog(upMode, defMode string, remote consul.Status) *consul.Catalog {
	cat := meshCatalog(consul.StatusPassing, consul.StatusPassing)
	cat = consul.NewCatalog(append(slices.Clone(cat.Services), &consul.Service{Name: "api", Datacenter: "dc2",
		Instances: []consul.Instance{{ID: "api-9", Node: "vm-z", Datacenter: "dc2", Address: "10.1.0.9", Port: 80, Status: consul.StatusPassing}}}))
	mesh := *meshCatalog(consul.StatusPassing, consul.StatusPassing).Mesh
	mesh.Proxies = slices.Clone(mesh.Proxies)
	web := &mesh.Proxies[1]
	web.Upstreams = []consul.Upstream{{Service: "api", Datacenter: "dc2", BindPort: 9300, GatewayMode: upMode}}
	mesh.GatewayModes = consul.GatewayModes{Default: defMode}
	mesh.Proxies = append(mesh.Proxies, consul.Proxy{Kind: consul.KindMeshGateway, ID: "mgw-1", Name: "mgw", Node: "vm-d", Datacenter: "dc1",
		Address: "10.0.0.4", ServiceAddress: "10.0.0.4", Port: 8443, WANAddress: "198.51.100.4", WANPort: 443, Status: consul.StatusPassing})
	gw := func(id, wan string, st consul.Status) consul.Proxy {
		return consul.Proxy{Kind: consul.KindMeshGateway, ID: id, Name: "mgw", Node: "vm-" + id, Datacenter: "dc2", Address: "10.1.0.4", Port: 8443, WANAddress: wan, WANPort: 443, Status: st}
	}
	mesh.RemoteGateways = map[string][]consul.Proxy{"dc2": {gw("mgw-2", "203.0.113.4", consul.StatusPassing), gw("mgw-3", "203.0.113.5", consul.StatusCritical)}}
	mesh.Endpoints = map[string][]consul.Proxy{
		"api":     {mesh.Proxies[0], mesh.Proxies[2]},
		"api@dc2": {{ID: "api-sidecar-proxy", Name: "api-sidecar-proxy", Node: "vm-z", Datacenter: "dc2", Address: "10.1.0.9", Port: 21001, Service: "api", ServiceID: "api-9", Status: remote}},
	}
	cat.Mesh = &mesh
	return cat
}

// TestMeshGatewayModeEndpoints: web's cluster of api@dc2, per mode: its
// name, SNI and endpoints (address:port health).
func TestMeshGatewayModeEndpoints(t *testing.T) {
	sni := ir.MeshClusterName("api", "dc2", td)
	for name, tc := range map[string]struct {
		up, def string
		remote  consul.Status
		cluster string
		want    []string
		warn    string
	}{
		"none: api's dc2 sidecar":             {"", "", consul.StatusPassing, sni, []string{"10.1.0.9:21001 HEALTHY"}, ""},
		"explicit none is an override":        {"none", "", consul.StatusPassing, customizationPrefix("none") + sni, []string{"10.1.0.9:21001 HEALTHY"}, ""},
		"local override: dc1's gateway, LAN":  {"local", "", consul.StatusPassing, "c225dc1c~" + sni, []string{"10.0.0.4:8443 HEALTHY"}, ""},
		"proxy-defaults local: plain name":    {"local", "local", consul.StatusPassing, sni, []string{"10.0.0.4:8443 HEALTHY"}, ""},
		"proxy-defaults only":                 {"", "local", consul.StatusPassing, sni, []string{"10.0.0.4:8443 HEALTHY"}, ""},
		"remote: dc2's gateways, WAN":         {"remote", "", consul.StatusPassing, "dd412229~" + sni, []string{"203.0.113.4:443 HEALTHY", "203.0.113.5:443 UNHEALTHY"}, ""},
		"gateway health is the target's":      {"local", "", consul.StatusCritical, "c225dc1c~" + sni, []string{"10.0.0.4:8443 UNHEALTHY"}, ""},
		"remote with api down: all unhealthy": {"remote", "", consul.StatusCritical, "dd412229~" + sni, []string{"203.0.113.4:443 UNHEALTHY", "203.0.113.5:443 UNHEALTHY"}, ""},
		"an unknown mode is none, warned":     {"sideways", "", consul.StatusPassing, sni, []string{"10.1.0.9:21001 HEALTHY"}, `mesh_gateway mode "sideways"`},
	} {
		t.Run(name, func(t *testing.T) {
			m, warnings := Build(crossDCCatalog(tc.up, tc.def, tc.remote), meshPolicy(t, "mesh {}\n"))
			if err := m.Validate(); err != nil {
				t.Fatal(err)
			}
			g := groupNamed(m, ir.SidecarGroupName("vm-a", "web-sidecar-proxy"))
			if g == nil || len(g.Sidecar.Upstreams) != 1 {
				t.Fatalf("web's sidecar: %+v", g)
			}
			if got := g.Sidecar.Upstreams[0].Cluster; got != tc.cluster {
				t.Errorf("cluster %q, want %q", got, tc.cluster)
			}
			c := m.Cluster(g.Sidecar.Upstreams[0].Cluster)
			if c == nil || c.TLS == nil || c.TLS.SNI != sni || !slices.Equal(c.TLS.MatchURISANs, []string{ir.SPIFFEID(td, "dc2", "api")}) {
				t.Fatalf("cluster %+v: want SNI %s and api's dc2 SPIFFE id", c, sni)
			}
			var got []string
			for _, ep := range c.Endpoints {
				got = append(got, fmt.Sprintf("%s:%d %s", ep.Address, ep.Port, ep.Health))
			}
			if slices.Sort(got); !slices.Equal(got, tc.want) {
				t.Errorf("endpoints %q, want %q", got, tc.want)
			}
			if tc.warn != "" && !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, tc.warn) }) {
				t.Errorf("no warning %q in %q", tc.warn, warnings)
			}
		})
	}
}

// TestMeshGatewayForwardsToOtherDatacenters: dc1's mesh gateway gets a
// chain for every service of dc2 ("*.dc2.internal.TD"), TLS untouched, to
// dc2's gateways at their WAN addresses (each with its own health); a
// datacenter with no gateway gets none.
func TestMeshGatewayForwardsToOtherDatacenters(t *testing.T) {
	cat := crossDCCatalog("local", "", consul.StatusPassing)
	cat.Mesh.RemoteGateways["dc3"] = []consul.Proxy{}
	m, _ := Build(cat, meshPolicy(t, "mesh {}\n"))
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	g := gatewayGroup(t, m, ir.SidecarGroupName("vm-d", "mgw-1"))
	cname := ir.GatewayClusterName("dc2", td)
	var remote []ir.GatewayChain
	for _, c := range g.Gateway.Chains {
		if c.Datacenter != "" {
			remote = append(remote, c)
		}
	}
	if len(remote) != 1 || remote[0].SNI != "*."+cname || remote[0].Cluster != cname || remote[0].Datacenter != "dc2" {
		t.Fatalf("remote chains %+v, want one for *.%s", remote, cname)
	}
	c := m.Cluster(cname)
	if c == nil || c.TLS != nil || !slices.Contains(g.Clusters, cname) {
		t.Fatalf("cluster %+v (group clusters %v)", c, g.Clusters)
	}
	var got []string
	for _, ep := range c.Endpoints {
		got = append(got, fmt.Sprintf("%s:%d %s", ep.Address, ep.Port, ep.Health))
	}
	if want := []string{"203.0.113.4:443 HEALTHY", "203.0.113.5:443 UNHEALTHY"}; !slices.Equal(got, want) {
		t.Errorf("endpoints %q, want %q", got, want)
	}
}

// TestFailoverThroughGateways: a local target failing over to dc2 is an
// aggregate whose dc2 member goes where the mode says, as Consul 1.15
// serves it: through dc1's gateway (target's own mode local), dc2's
// gateways at their WAN address (an upstream override remote, which also
// prefixes the aggregate and both members with Consul's customization
// hash), or api's dc2 sidecar (none). The local member stays direct.
func TestFailoverThroughGateways(t *testing.T) {
	local := ir.MeshClusterName("api", "dc1", td)
	remote := ir.MeshClusterName("api", "dc2", td)
	ft := ir.FailoverTargetPrefix
	for name, tc := range map[string]struct {
		up, def string
		prefix  string
		want    []string
	}{
		"own mode local":  {"", "local", "", []string{"10.0.0.4:8443 HEALTHY"}},
		"override remote": {"remote", "local", "dd412229~", []string{"203.0.113.4:443 HEALTHY", "203.0.113.5:443 UNHEALTHY"}},
		"none":            {"", "", "", []string{"10.1.0.9:21001 HEALTHY"}},
	} {
		t.Run(name, func(t *testing.T) {
			cat := crossDCCatalog("", tc.def, consul.StatusPassing)
			cat.Mesh.Proxies[1].Upstreams = []consul.Upstream{{Service: "api", BindPort: 9300, GatewayMode: tc.up}}
			m, warnings := Build(cat, meshPolicy(t, "mesh {}\nservice \"api\" {\n  failover {\n    datacenters = [\"dc2\"]\n  }\n}\n"))
			if err := m.Validate(); err != nil {
				t.Fatal(err)
			}
			agg := m.Cluster(tc.prefix + local)
			if agg == nil || !slices.Equal(agg.Aggregate, []string{ft + tc.prefix + local, ft + tc.prefix + remote}) {
				t.Fatalf("aggregate %s = %+v (warnings %q)", tc.prefix+local, agg, warnings)
			}
			endpoints := func(c *ir.Cluster) (out []string) {
				for _, ep := range c.Endpoints {
					out = append(out, fmt.Sprintf("%s:%d %s", ep.Address, ep.Port, ep.Health))
				}
				return out
			}
			far := m.Cluster(ft + tc.prefix + remote)
			if far == nil || far.TLS.SNI != remote || !slices.Equal(endpoints(far), tc.want) {
				t.Errorf("dc2 member = %+v, want SNI %s and endpoints %q", far, remote, tc.want)
			}
			near := m.Cluster(ft + tc.prefix + local)
			if near == nil || near.TLS.SNI != local || len(near.Endpoints) != 2 || near.Endpoints[0].Address.String() != "10.0.0.1" {
				t.Errorf("dc1 member = %+v, want api's two local sidecars", near)
			}
			if slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "failover") }) {
				t.Errorf("a failover warning: %q", warnings)
			}
		})
	}
}
