package model

import (
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
)

// holdMesh is HoldDowngrades for Consul Connect's state: the sidecars and
// gateways (whose own checks a restarted agent reports critical too, and
// which a Consul without its state lists as gone), each upstream's
// Connect endpoints and other datacenters' mesh gateways. A proxy of a
// held datacenter that got worse or is gone is kept as prev had it; a
// list cur lacks altogether is kept too. It returns cur itself when it
// holds nothing, and how many proxies it held.
//
// A list's datacenter is where it was read from, as a service's is: the
// local one ("") for the sidecars and gateways, the upstream's key for its
// endpoints ("api" or "api@dc2"), the map's key for remote gateways. Not
// the proxies' own Datacenter field: that is Consul's name for the local
// datacenter too ("dc1"), which the daemon knows as local only when
// consul.datacenter is set.
func holdMesh(prev, cur *consul.Mesh, held func(datacenter string) bool) (*consul.Mesh, int) {
	if prev == nil || cur == nil {
		return cur, 0
	}
	out := *cur
	count := 0
	if ps, n := holdProxies(prev.Proxies, cur.Proxies, held("")); n > 0 {
		out.Proxies, count = ps, count+n
	}
	if m, n := holdProxyMap(prev.Endpoints, cur.Endpoints, func(key string) bool { return held(keyDatacenter(key)) }); n > 0 {
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

// keyDatacenter is the datacenter of a consul.ServiceKey's String ("" for
// a local one); Consul's service names have no "@".
func keyDatacenter(key string) string {
	if i := strings.LastIndexByte(key, '@'); i >= 0 {
		return key[i+1:]
	}
	return ""
}

// holdProxyMap is holdProxies for each list of a map whose key heldKey
// says is held; a map it changes is a copy.
func holdProxyMap(prev, cur map[string][]consul.Proxy, heldKey func(string) bool) (map[string][]consul.Proxy, int) {
	var out map[string][]consul.Proxy
	count := 0
	for k, old := range prev {
		ps, n := holdProxies(old, cur[k], heldKey(k))
		if n == 0 {
			continue
		}
		if out == nil {
			out = make(map[string][]consul.Proxy, len(cur)+1)
			for k, v := range cur {
				out[k] = v
			}
		}
		out[k] = ps
		count += n
	}
	if out == nil {
		return cur, 0
	}
	return out, count
}

// holdProxies is holdList for a list read from a held datacenter, or cur
// itself when it was not.
func holdProxies(prev, cur []consul.Proxy, held bool) ([]consul.Proxy, int) {
	if !held {
		return cur, 0
	}
	return holdList(prev, cur, func(consul.Proxy) bool { return true },
		func(p consul.Proxy) [2]string { return [2]string{p.Node, p.ID} },
		func(p *consul.Proxy) *consul.Status { return &p.Status })
}
