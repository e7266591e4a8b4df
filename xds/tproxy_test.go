package xds_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// meshTransparent: meshUpstreams' web sidecar made transparent, with two
// implicit upstreams (tcp "ledger" on two virtual IPs, http "pay") and
// passthrough.
func meshTransparent(t *testing.T, passthrough bool) *ir.Model {
	m := meshUpstreams(t)
	ledger := meshCluster("ledger", "web", false, meshEndpoint("10.0.0.10", 21000))
	pay := meshCluster("pay", "web", false, meshEndpoint("10.0.0.11", 21000))
	m.Clusters = append(m.Clusters, ledger, pay)
	g := &m.Groups[0]
	g.Clusters = append(g.Clusters, ledger.Name, pay.Name)
	if passthrough {
		m.Clusters = append(m.Clusters, &ir.Cluster{Name: ir.OriginalDestinationCluster, ConnectTimeout: 5 * time.Second, OriginalDestination: true})
		g.Clusters = append(g.Clusters, ir.OriginalDestinationCluster)
	}
	g.Sidecar.Transparent = &ir.TransparentOutbound{Port: 15001, Passthrough: passthrough}
	g.Sidecar.Upstreams = append(g.Sidecar.Upstreams,
		ir.MeshUpstream{Service: "pay", Protocol: "http", Cluster: pay.Name, VirtualIPs: []string{"240.0.0.9"}},
		ir.MeshUpstream{Service: "ledger", Protocol: "tcp", Cluster: ledger.Name, VirtualIPs: []string{"240.0.0.8", "240.0.0.10"}},
	)
	return sortModel(m)
}

// TestTransparentOutboundListener: Consul's outbound listener (name,
// 127.0.0.1, OUTBOUND, original_dst), one chain per implicit upstream on
// its virtual IPs (/32 each), sorted by the first as Consul sorts, the
// HTTP chain's routes over RDS; the passthrough default chain and an
// ORIGINAL_DST cluster without endpoints; none of it without passthrough.
func TestTransparentOutboundListener(t *testing.T) {
	for _, passthrough := range []bool{true, false} {
		m := meshTransparent(t, passthrough)
		out, err := xds.Translate(m)
		if err != nil {
			t.Fatal(err)
		}
		g := m.Groups[0]
		if err := out.Failed[g.Name]; err != nil {
			t.Fatal(err)
		}
		r := out.Groups[g.Name]
		l := listenerNamed(t, r, "outbound_listener:127.0.0.1:15001")
		if sa := l.GetAddress().GetSocketAddress(); sa.GetAddress() != "127.0.0.1" || sa.GetPortValue() != 15001 || l.GetTrafficDirection() != corev3.TrafficDirection_OUTBOUND {
			t.Errorf("address %v, direction %v", sa, l.GetTrafficDirection())
		}
		if lf := l.GetListenerFilters(); len(lf) != 1 || lf[0].GetName() != "envoy.filters.listener.original_dst" {
			t.Errorf("listener filters %v", lf)
		}
		var got [][]string
		for _, fc := range l.GetFilterChains() {
			var ips []string
			for _, p := range fc.GetFilterChainMatch().GetPrefixRanges() {
				if p.GetPrefixLen().GetValue() != 32 {
					t.Errorf("chain %q matches %s/%d, want /32", fc.GetName(), p.GetAddressPrefix(), p.GetPrefixLen().GetValue())
				}
				ips = append(ips, p.GetAddressPrefix())
			}
			got = append(got, append([]string{fc.GetName()}, ips...))
		}
		// Consul sorts ranges and chains as text: "240.0.0.10" < "240.0.0.8".
		want := [][]string{{g.Name + ".outbound.ledger", "240.0.0.10", "240.0.0.8"}, {g.Name + ".outbound.pay", "240.0.0.9"}}
		if !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("chains %v, want %v", got, want)
		}
		if !slices.ContainsFunc(r.Routes, func(rc *routev3.RouteConfiguration) bool { return rc.GetName() == g.Name+".outbound.pay" }) {
			t.Errorf("no route configuration for pay's chain")
		}
		if !slices.IsSortedFunc(r.Listeners, func(a, b *listenerv3.Listener) int { return strings.Compare(a.GetName(), b.GetName()) }) {
			t.Error("group listeners not sorted by name")
		}
		reach := out.Reach[g.Name]
		var oc *clusterv3.Cluster
		for _, c := range reach.Clusters {
			if c.GetName() == ir.OriginalDestinationCluster {
				oc = c
			}
		}
		for _, e := range reach.Endpoints {
			if e.GetClusterName() == ir.OriginalDestinationCluster {
				t.Error("an EDS resource for the ORIGINAL_DST cluster")
			}
		}
		d := l.GetDefaultFilterChain()
		if !passthrough {
			if d != nil || oc != nil {
				t.Errorf("mesh destinations only: default chain %v, cluster %v", d, oc)
			}
			continue
		}
		if oc.GetType() != clusterv3.Cluster_ORIGINAL_DST || oc.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED {
			t.Errorf("original-destination cluster %v", oc)
		}
		tp := &tcpproxyv3.TcpProxy{}
		if len(d.GetFilters()) != 1 || d.GetFilters()[0].GetTypedConfig().UnmarshalTo(tp) != nil || tp.GetCluster() != ir.OriginalDestinationCluster {
			t.Errorf("default chain %v", d)
		}
		// A node in no group never gets the passthrough cluster.
		for _, c := range out.Unmatched.Clusters {
			if c.GetName() == ir.OriginalDestinationCluster {
				t.Error("unmatched nodes get original-destination")
			}
		}
	}
}

// TestTransparentValidation: an implicit upstream needs a transparent
// sidecar and a virtual IP; the outbound port is not another listener's.
func TestTransparentValidation(t *testing.T) {
	for name, mod := range map[string]func(*ir.Sidecar){
		"no transparent": func(s *ir.Sidecar) { s.Transparent = nil },
		"no virtual ip":  func(s *ir.Sidecar) { s.Upstreams[len(s.Upstreams)-1].VirtualIPs = nil },
		"bad virtual ip": func(s *ir.Sidecar) { s.Upstreams[len(s.Upstreams)-1].VirtualIPs = []string{"api.service.consul"} },
		"port clash":     func(s *ir.Sidecar) { s.Transparent.Port = 15432; s.Upstreams[0].BindAddress = "127.0.0.1" },
	} {
		t.Run(name, func(t *testing.T) {
			m := meshTransparent(t, true)
			mod(m.Groups[0].Sidecar)
			if err := m.Validate(); !errors.Is(err, ir.ErrSidecar) {
				t.Errorf("Validate = %v, want ErrSidecar", err)
			}
		})
	}
}
