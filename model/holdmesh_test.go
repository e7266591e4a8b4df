package model

import (
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
)

// TestHoldDowngradesKeepsConnect: in a held datacenter, a sidecar whose own
// check a restarted agent reports critical keeps its status, a sidecar or
// gateway Consul no longer lists is kept (in the proxies, an upstream's
// Connect endpoints and other datacenters' gateways alike), and an
// upstream list Consul lacks altogether is kept; a new sidecar, an
// improvement and another datacenter's removal pass. A list's datacenter
// is where it was read from, not the proxies' Datacenter field (Consul's
// name for the local datacenter too). The input is not modified.
func TestHoldDowngradesKeepsConnect(t *testing.T) {
	px := func(id, dc string, st consul.Status) consul.Proxy {
		return consul.Proxy{ID: id, Name: "api-sidecar-proxy", Node: "n-" + id, Datacenter: dc, Status: st}
	}
	pass, crit := consul.StatusPassing, consul.StatusCritical
	prevMesh := &consul.Mesh{
		Proxies: []consul.Proxy{px("a", "dc1", pass), px("b", "dc1", pass), px("g", "dc1", pass)},
		Endpoints: map[string][]consul.Proxy{
			"api":     {px("a", "dc1", pass), px("b", "dc1", pass)},
			"web":     {px("w", "dc1", pass)},
			"api@dc2": {px("r", "dc2", pass)},
		},
		RemoteGateways: map[string][]consul.Proxy{"dc3": {px("gw", "dc3", pass)}},
	}
	curMesh := &consul.Mesh{
		TrustDomain: "new.consul",
		Proxies:     []consul.Proxy{px("a", "dc1", crit), px("c", "dc1", crit)},
		Endpoints: map[string][]consul.Proxy{
			"api":     {px("a", "dc1", crit), px("c", "dc1", crit)},
			"api@dc2": {},
		},
		RemoteGateways: map[string][]consul.Proxy{},
	}
	prev := &consul.Catalog{Mesh: prevMesh}
	cur := &consul.Catalog{Mesh: curMesh}
	// The daemon with consul.datacenter unset: the local datacenter is
	// "", and the proxies' own field says Consul's name for it, "dc1".
	held := func(dc string) bool { return dc == "" || dc == "dc3" }
	got, n := HoldDowngrades(prev, cur, held)
	m := got.Mesh
	ids := func(ps []consul.Proxy) string {
		s := ""
		for _, p := range ps {
			s += p.ID + ":" + string(p.Status) + " "
		}
		return s
	}
	if s := ids(m.Proxies); s != "a:passing b:passing c:critical g:passing " {
		t.Errorf("proxies %q, want a held at passing, b and g kept, the new c as it is", s)
	}
	if s := ids(m.Endpoints["api"]); s != "a:passing b:passing c:critical " {
		t.Errorf("api's Connect endpoints %q, want a held, b kept, c new", s)
	}
	if s := ids(m.Endpoints["web"]); s != "w:passing " {
		t.Errorf("web's Connect endpoints, which Consul no longer lists, are %q, want kept", s)
	}
	if s := ids(m.Endpoints["api@dc2"]); s != "" {
		t.Errorf("dc2's api endpoints %q: dc2 is not held, its removal passes", s)
	}
	if s := ids(m.RemoteGateways["dc3"]); s != "gw:passing " {
		t.Errorf("dc3's mesh gateways %q, want the gateway kept", s)
	}
	if m.TrustDomain != "new.consul" {
		t.Error("the rest of the mesh is not cur's")
	}
	// a, b, g in the proxies; a, b in api; w; gw.
	if n != 7 {
		t.Errorf("held %d, want 7", n)
	}
	if len(curMesh.Proxies) != 2 || curMesh.Proxies[0].Status != crit || len(curMesh.Endpoints) != 2 || len(curMesh.RemoteGateways) != 0 {
		t.Error("HoldDowngrades modified its input")
	}
	if got, n := HoldDowngrades(prev, &consul.Catalog{Mesh: prevMesh}, held); n != 0 || got.Mesh != prevMesh {
		t.Errorf("an unchanged mesh: held %d, copied %v", n, got.Mesh != prevMesh)
	}
}
