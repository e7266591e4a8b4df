package model

import (
	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
)

// holdMesh is HoldDowngrades for Consul Connect's state: the sidecars and
// gateways (whose own checks a restarted agent reports critical too, and
// which a Consul without its state lists as gone), each upstream's
// Connect endpoints and other datacenters' mesh gateways. A proxy of a
// held datacenter (its Datacenter, as a service's) that got worse or is
// gone is kept as prev had it; a list cur lacks altogether is kept if it
// has such a proxy. It returns cur itself when it holds nothing, and how
// many proxies it held.
func holdMesh(prev, cur *consul.Mesh, held func(datacenter string) bool) (*consul.Mesh, int) {
	if prev == nil || cur == nil {
		return cur, 0
	}
	out := *cur
	count := 0
	if ps, n := holdProxies(prev.Proxies, cur.Proxies, held); n > 0 {
		out.Proxies, count = ps, count+n
	}
	if m, n := holdProxyMap(prev.Endpoints, cur.Endpoints, held); n > 0 {
		out.Endpoints, count = m, count+n
	}
	if m, n := holdProxyMap(prev.RemoteGateways, cur.RemoteGateways, held); n > 0 {
		out.RemoteGateways, count = m, count+n
	}
	if count == 0 {
		return cur, 0
	}
	return &out, count
}

// holdProxyMap is holdProxies for each list of a map; a map it changes is
// a copy.
func holdProxyMap(prev, cur map[string][]consul.Proxy, held func(string) bool) (map[string][]consul.Proxy, int) {
	var out map[string][]consul.Proxy
	count := 0
	set := func(k string, ps []consul.Proxy) {
		if out == nil {
			out = make(map[string][]consul.Proxy, len(cur)+1)
			for k, v := range cur {
				out[k] = v
			}
		}
		out[k] = ps
	}
	for k, old := range prev {
		ps, n := holdProxies(old, cur[k], held)
		if n == 0 {
			continue
		}
		set(k, ps)
		count += n
	}
	if out == nil {
		return cur, 0
	}
	return out, count
}

// holdProxies is holdList for the proxies of held datacenters.
func holdProxies(prev, cur []consul.Proxy, held func(string) bool) ([]consul.Proxy, int) {
	return holdList(prev, cur, func(p consul.Proxy) bool { return held(p.Datacenter) },
		func(p consul.Proxy) [2]string { return [2]string{p.Node, p.ID} },
		func(p *consul.Proxy) *consul.Status { return &p.Status })
}
